"""The job state machine, loaded from ``statemachines/`` with the shape's substitutions, logged and traced."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.nag import acknowledge
from spotrun.shape import DeploymentShape

PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_]+)\}")


def placeholders(definition: str) -> set[str]:
    """Names of the ``${Placeholder}`` s in an ASL document."""
    return set(PLACEHOLDER.findall(definition))


class Workflow(Construct):
    """The Standard state machine that runs one job per execution.

    Attributes
    ----------
    state_machine
        The state machine.
    log_group
        Where it logs every event (without execution data).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        shape: DeploymentShape,
        definition_file: Path,
        functions: Mapping[str, lambda_.IFunction],
    ):
        super().__init__(scope, construct_id)
        definition = definition_file.read_text()
        missing = sorted(placeholders(definition) - set(shape.state_machine_functions))
        if missing:
            # The same check as the emulator's: the ASL file and the shape have drifted apart.
            raise ValueError(f"state machine placeholders without a value in the shape: {', '.join(missing)}")
        invoked = {name: functions[name] for name in shape.state_machine_functions.values()}
        self.log_group = logs.LogGroup(
            self, "Logs", retention=logs.RetentionDays.THREE_MONTHS, removal_policy=RemovalPolicy.DESTROY
        )
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
            description="spotrun job workflow: invokes the workflow's functions, logs, traces",
        )
        # Exactly the functions the ASL names, unqualified ($LATEST) as the ASL calls them: no ARN wildcard.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["lambda:InvokeFunction"], resources=[fn.function_arn for fn in invoked.values()]
            )
        )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            state_machine_type=sfn.StateMachineType.STANDARD,
            definition_body=sfn.DefinitionBody.from_string(definition),
            definition_substitutions={
                placeholder: invoked[name].function_arn
                for placeholder, name in shape.state_machine_functions.items()
            },
            role=role,
            # ALL events, but never the execution data: the agent steps' input carries task tokens.
            logs=sfn.LogOptions(
                destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=False
            ),
            tracing_enabled=True,
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::*]",
            "Step Functions' log delivery (logs:CreateLogDelivery and related) and X-Ray trace uploads have no "
            "resource-level permissions; CDK adds exactly those statements for logging and tracing",
        )

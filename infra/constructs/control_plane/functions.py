"""Every Lambda function of :data:`spotrun.shape.SHAPE`, each with its own least-privilege role."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.constructs.control_plane.bundling import bundled, lambda_trees
from infra.constructs.iam.permissions import Grant, Targets, grants_for
from infra.lambda_env import FUNCTION_ENVIRONMENT, LAMBDA_PYTHON
from infra.nag import acknowledge, flatten_reference
from infra.shape_tags import mark
from spotrun.aws.settings import ENV_PREFIX, Settings
from spotrun.shape import DeploymentShape, FunctionSpec

# The runtime whose Python the bundle is tested on (infra.lambda_env.LAMBDA_PYTHON: the newest this project's
# machines can install) and the Powertools layer built for it.
RUNTIME: lambda_.Runtime = getattr(lambda_.Runtime, f"PYTHON_{LAMBDA_PYTHON.replace('.', '_')}")
POWERTOOLS_LAYER = f"AWSLambdaPowertoolsPythonV3-python{LAMBDA_PYTHON.replace('.', '')}-x86_64"
RUNTIME_REASON = (
    f"python{LAMBDA_PYTHON} is the newest Python runtime that can be tested: tests/infra/test_bundle_imports.py "
    "imports every handler on the runtime's Python, and Lambda's newest (python3.14) cannot be installed on the "
    "project's development and CI machines"
)
POWERTOOLS_ACCOUNT = "017000801446"  # AWS's account that publishes the public Powertools layers
XRAY_REASON = (
    "X-Ray trace uploads (xray:PutTraceSegments, xray:PutTelemetryRecords, added by active tracing) have no "
    "resource-level permissions"
)


def powertools_layer_arn(version: int) -> str:
    """ARN of the public Powertools for AWS Lambda (Python) V3 layer in the stack's region."""
    return f"arn:{Aws.PARTITION}:lambda:{Aws.REGION}:{POWERTOOLS_ACCOUNT}:layer:{POWERTOOLS_LAYER}:{version}"


def setting_env(settings: Settings, names: tuple[str, ...]) -> dict[str, str]:
    """The ``SPOTRUN_*`` variables of ``settings`` for the fields in ``names`` only.

    Uses :meth:`Settings.to_env`, the same conversion the code reads back: each function's runtime
    (:mod:`functions.runtime`) reads exactly these at its cold start, and fails naming any that is missing.
    """
    wanted = {ENV_PREFIX + name.upper() for name in names}
    return {key: value for key, value in settings.to_env().items() if key in wanted}


class Functions(Construct):
    """One function per :class:`~spotrun.shape.FunctionSpec`; wire them with :meth:`configure`.

    Attributes
    ----------
    functions
        Logical name -> function.
    roles
        Logical name -> the function's own role.
    """

    def __init__(self, scope: Construct, construct_id: str, *, shape: DeploymentShape, layer_version: int):
        super().__init__(scope, construct_id)
        self._shape = shape
        layer = lambda_.LayerVersion.from_layer_version_arn(
            self, "PowertoolsLayer", powertools_layer_arn(layer_version)
        )
        # One package for every function: handlers are thin modules over the same core.
        code = lambda_.Code.from_asset(**bundled(lambda_trees(), RUNTIME.bundling_image))
        self.functions: dict[str, lambda_.Function] = {}
        self.roles: dict[str, iam.Role] = {}
        for spec in shape.functions:
            self._function(spec, code, layer)

    def _function(self, spec: FunctionSpec, code: lambda_.Code, layer: lambda_.ILayerVersion) -> None:
        scope = Construct(self, _pascal(spec.name))
        role = iam.Role(
            scope,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"spotrun {spec.name} function: only what its settings and code need",
        )
        log_group = logs.LogGroup(
            scope, "Logs", retention=logs.RetentionDays.ONE_MONTH, removal_policy=RemovalPolicy.DESTROY
        )
        # Written by hand rather than through the AWSLambdaBasicExecutionRole managed policy: its own group only.
        log_group.grant_write(role)
        function = lambda_.Function(
            scope,
            "Function",
            runtime=RUNTIME,
            architecture=lambda_.Architecture.X86_64,
            handler=spec.handler,
            code=code,
            description=spec.description,
            timeout=Duration.seconds(spec.timeout_seconds),
            memory_size=spec.memory_mb,
            role=role,
            layers=[layer],
            tracing=lambda_.Tracing.ACTIVE,
            log_group=log_group,
            environment=dict(FUNCTION_ENVIRONMENT),
        )
        # cdk-nag AwsSolutions-L1 asks for the latest runtime; this one is what the bundle's tests run on.
        acknowledge(function, "AwsSolutions-L1", RUNTIME_REASON)
        mark(function, "function", spec.name)
        self.functions[spec.name] = function
        self.roles[spec.name] = role

    def configure(self, settings: Settings, targets: Targets, bucket_settings: Mapping[str, str]) -> None:
        """Give each function the settings it reads and the permissions they imply.

        Called once every resource exists, because some settings (the state machine's ARN) belong to
        resources that are built from these functions.

        Parameters
        ----------
        settings
            The deployment's settings; values are tokens of the stack's resources.
        targets
            ARNs for the IAM statements.
        bucket_settings
            Setting name -> logical bucket name.
        """
        for spec in self._shape.functions:
            function, role = self.functions[spec.name], self.roles[spec.name]
            for key, value in setting_env(settings, spec.settings).items():
                function.add_environment(key, value)
            grants = grants_for(spec, targets, bucket_settings)
            for grant in grants:
                role.add_to_policy(
                    iam.PolicyStatement(
                        actions=list(grant.actions),
                        resources=list(grant.resources),
                        conditions=dict(grant.conditions) or None,
                    )
                )
            self._acknowledge_wildcards(role, grants)

    def _acknowledge_wildcards(self, role: iam.Role, grants: list[Grant]) -> None:
        """Acknowledge each wildcard resource of the role's policy with the reasons of the grants using it."""
        reasons: dict[str, list[str]] = {"*": [XRAY_REASON]}
        for grant in grants:
            for resource in grant.resources:
                flat = flatten_reference(role.stack.resolve(resource))
                if "*" in flat and grant.why not in reasons.setdefault(flat, []):
                    reasons[flat].append(grant.why)
        for flat, why in reasons.items():
            acknowledge(role, f"AwsSolutions-IAM5[Resource::{flat}]", "; ".join(why))


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))

"""The deployment's roles as the emulator creates them in moto's IAM, each holding what the CDK app gives it.

- the functions' role (one for every function locally: the emulator judges no function's call);
- the job-access role, trusted by the functions' role, with the ceiling each job's session policy narrows
  (``infra.constructs.iam.job_access``) and the deployment's secret references;
- the instances' role (the launch template's instance profile), with AWS's managed policy and the statements
  ``infra.constructs.compute.instances`` and ``deny_to_instances`` add.

The statements come from :mod:`spotrun.model.agent_protocol.session_policy`, the one home of each, shared
with the CDK app.
"""

from __future__ import annotations

import json
from typing import Any

from spotrun.local.iam import managed_policies
from spotrun.local.server import ACCOUNT_ID
from spotrun.model.agent_protocol.session_policy import (
    SESSION_SECONDS,
    ceiling_statements,
    instance_metrics_statements,
    instance_secret_denials,
    secret_ceiling_statements,
)
from spotrun.shape import METRICS_NAMESPACE

ROLE_NAME = "spotrun-local-execution"
# The instances' role (the launch template's instance profile): each simulated instance gets its own session.
INSTANCE_ROLE_NAME = "spotrun-local-instances"
JOB_ACCESS_ROLE_NAME = "spotrun-local-job-access"


def functions_role(iam: Any) -> str:
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": ["lambda.amazonaws.com", "states.amazonaws.com"]},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    return str(iam.create_role(RoleName=ROLE_NAME, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"])


def secret_ceiling(iam: Any, patterns: tuple[str, ...]) -> None:
    # As infra.constructs.iam.job_access: the role reads the allowed references (a policy of its own, since IAM
    # refuses a policy without statements).
    statements = secret_ceiling_statements(patterns)
    if statements:
        document = {"Version": "2012-10-17", "Statement": statements}
        iam.put_role_policy(
            RoleName=JOB_ACCESS_ROLE_NAME, PolicyName="secrets", PolicyDocument=json.dumps(document)
        )


def instance_role(iam: Any, secret_references: tuple[str, ...]) -> str:
    """The instances' role, holding what ``infra.constructs.compute.instances`` and ``deny_to_instances`` give it
    on AWS.

    AWS's ``AmazonSSMManagedInstanceCore`` (the SSM Agent's; it reads every SSM parameter), the agent's metrics
    in spotrun's namespace, and the explicit denial of the deployment's allowed parameter references (the job
    reads its own through its job's session). Two statements of the deployed role have nothing to act on here:
    ``s3:GetObject`` of the agent package's CDK asset (the emulator starts the agent from this checkout) and
    ``execute-api:Invoke`` of the agent routes (the API stand-in authenticates its callers itself,
    :class:`spotrun.local.api.auth.Callers`).

    Returns
    -------
    str
        The role's ARN.
    """
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    role = iam.create_role(RoleName=INSTANCE_ROLE_NAME, AssumeRolePolicyDocument=json.dumps(trust))["Role"]
    managed_policies.install(ACCOUNT_ID)  # moto's IAM holds no AWS managed policy until they are put there
    iam.attach_role_policy(
        RoleName=INSTANCE_ROLE_NAME,
        PolicyArn=managed_policies.arn(managed_policies.SSM_MANAGED_INSTANCE_CORE),
    )
    statements = instance_metrics_statements(METRICS_NAMESPACE) + instance_secret_denials(secret_references)
    iam.put_role_policy(
        RoleName=INSTANCE_ROLE_NAME,
        PolicyName="instance",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}),
    )
    return str(role["Arn"])


def job_access_role(iam: Any, jobs_bucket: str, functions_role_arn: str, log_group_arn: str) -> str:
    # As infra.constructs.iam.job_access: trusted by the functions' role (one role for every function locally),
    # holding the ceiling that each session policy narrows to one job.
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"AWS": functions_role_arn}, "Action": "sts:AssumeRole"}
        ],
    }
    role = iam.create_role(
        RoleName=JOB_ACCESS_ROLE_NAME,
        AssumeRolePolicyDocument=json.dumps(trust),
        MaxSessionDuration=SESSION_SECONDS,
    )["Role"]
    ceiling = {
        "Version": "2012-10-17",
        "Statement": ceiling_statements(f"arn:aws:s3:::{jobs_bucket}", log_group_arn=log_group_arn),
    }
    iam.put_role_policy(
        RoleName=JOB_ACCESS_ROLE_NAME, PolicyName="ceiling", PolicyDocument=json.dumps(ceiling)
    )
    return str(role["Arn"])

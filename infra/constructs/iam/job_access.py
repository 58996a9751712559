"""The job-access role: the ceiling of every instance's S3 credentials, which a session policy narrows to one job.

Only the API function may assume it (its trust policy names that function's role alone), and it does so for
the instance of a job's open attempt, with that job's session policy
(:func:`spotrun.model.agent_protocol.session_policy.job_session_policy`). A session's permissions are the
intersection of this role's policy and the session policy
(https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies.html#policies_session), so this policy is
the union of what any job may need, and no single session holds it.
"""

from __future__ import annotations

from aws_cdk import Aws, Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.nag import acknowledge, wildcard_resource_finding
from spotrun.model.agent_protocol import session_policy
from spotrun.model.layout import JOBS_PREFIX

_NARROWED = (
    "a ceiling: only the API function's role may assume this role, and it always passes a session policy naming "
    "one job (spotrun.model.agent_protocol.session_policy); a session's permissions are the intersection of the two"
)


class JobAccess(Construct):
    """The job-access role.

    Parameters
    ----------
    jobs_bucket
        The deployment's jobs bucket.
    training_logs_arn
        The log group of live training logs (``infra.constructs.data.training_logs``): its streams are written.
    data_buckets
        The deployer's buckets of training inputs and code (read only).
    secret_references
        The deployer's ARN patterns of secrets jobs may read (``training.secrets``); none by default.
    trusted
        The API function's role: the only principal that may assume this one.

    Attributes
    ----------
    role
        The role.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        jobs_bucket: s3.IBucket,
        training_logs_arn: str,
        data_buckets: tuple[str, ...],
        trusted: iam.IRole,
        secret_references: tuple[str, ...] = (),
    ):
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ArnPrincipal(trusted.role_arn),
            description="spotrun job access: S3 credentials of one job's instance, narrowed by a session policy",
            # Role chaining (the API function's session assumes it) caps a session at one hour anyway.
            max_session_duration=Duration.seconds(session_policy.SESSION_SECONDS),
        )
        data_bucket_arns = tuple(f"arn:{Aws.PARTITION}:s3:::{name}" for name in data_buckets)
        ceiling = session_policy.ceiling_statements(
            jobs_bucket.bucket_arn, data_bucket_arns, log_group_arn=training_logs_arn
        )
        for statement in ceiling:
            self.role.add_to_policy(iam.PolicyStatement.from_json(statement))
        for name in data_buckets:
            acknowledge(
                self.role,
                f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::{name}/*]",
                f"read-only: the training data bucket {name}, named by the deployer (data_buckets); {_NARROWED}",
            )
        self._secrets(secret_references)
        acknowledge(
            self.role,
            wildcard_resource_finding(self.role, f"{training_logs_arn}:log-stream:*"),
            f"writes streams of the deployment's training log group only; {_NARROWED}, which names its own "
            "attempt's stream",
        )
        working = jobs_bucket.arn_for_objects(f"{JOBS_PREFIX}*")
        checkpoints = jobs_bucket.arn_for_objects(f"{JOBS_PREFIX}*/checkpoints/*")
        everything = jobs_bucket.arn_for_objects("*")
        acknowledge(
            self.role,
            wildcard_resource_finding(self.role, working),
            f"writes under jobs/ only (checkpoints, outputs, logs, progress of a job); {_NARROWED}, whose writes "
            "name its own checkpoints, outputs and this attempt's log, progress and output list",
        )
        acknowledge(
            self.role,
            wildcard_resource_finding(self.role, checkpoints),
            f"deletes only checkpoints (the agent prunes old ones); {_NARROWED}, which names its own checkpoints",
        )
        acknowledge(
            self.role,
            wildcard_resource_finding(self.role, everything),
            f"read-only: inputs and code may sit anywhere in the jobs bucket; {_NARROWED}, whose reads name its "
            "own jobs/<job-id>/, its manifest's inputs and code, and the checkpoints of the job it resumes from",
        )

    def _secrets(self, patterns: tuple[str, ...]) -> None:
        """Read the deployer's secret references, and decrypt them only through their service."""
        for statement in session_policy.secret_ceiling_statements(patterns):
            self.role.add_to_policy(iam.PolicyStatement.from_json(statement))
        for pattern in patterns:
            if "*" in pattern:
                acknowledge(
                    self.role,
                    f"AwsSolutions-IAM5[Resource::{pattern}]",
                    f"read-only: secrets the deployer allows jobs to read (secret_references); {_NARROWED}, "
                    "which names exactly the job's own references",
                )
        if patterns:
            acknowledge(
                self.role,
                "AwsSolutions-IAM5[Resource::*]",
                "kms:Decrypt only through Secrets Manager or Parameter Store (kms:ViaService): the key of a "
                "secret is not known in advance, and the service call itself is limited to the allowed "
                f"references; {_NARROWED}",
            )


def deny_to_instances(instance_role: iam.IRole, secret_references: tuple[str, ...]) -> None:
    """Refuse the instance role the allowed SSM parameters (its SSM managed policy reads every parameter).

    Parameters
    ----------
    instance_role
        The instances' role.
    secret_references
        The deployer's patterns (option ``secret_references``).
    """
    for statement in session_policy.instance_secret_denials(secret_references):
        instance_role.add_to_principal_policy(iam.PolicyStatement.from_json(statement))

"""The deployment's CloudWatch Logs group of live training logs: one stream per job attempt, written by the agent.

Named after the jobs bucket (:func:`spotrun.model.layout.log_group`), so the agent, the API and the job's session
policy find it without another setting. CloudWatch Logs encrypts every log group at rest
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html); the log lines hold
nothing the S3 copy beside the job's other objects does not (training output, secrets masked by the agent).
"""

from __future__ import annotations

from aws_cdk import Aws, RemovalPolicy
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from spotrun.model.layout import log_group
from spotrun.shape import LOG_RETENTION_DAYS


class TrainingLogs(Construct):
    """The log group.

    Parameters
    ----------
    jobs_bucket
        The deployment's jobs bucket, which names the group.

    Attributes
    ----------
    group
        The log group.
    arn
        Its ARN without the trailing ``:*`` (``arn:...:log-group:<name>``), to which ``:log-stream:*`` is added.
    """

    def __init__(self, scope: Construct, construct_id: str, *, jobs_bucket: s3.IBucket):
        super().__init__(scope, construct_id)
        name = log_group(jobs_bucket.bucket_name)
        self.group = logs.LogGroup(
            self,
            "Group",
            log_group_name=name,
            # The durable copy of each attempt's log is in the jobs bucket, which is retained.
            removal_policy=RemovalPolicy.DESTROY,
        )
        # The shape's number of days, as the emulator sets it too (the L2 takes only its enum's members).
        cfn = self.group.node.default_child
        assert isinstance(cfn, logs.CfnLogGroup)
        cfn.retention_in_days = LOG_RETENTION_DAYS
        self.arn = f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:{name}"

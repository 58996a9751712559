"""The buckets and tables of :data:`spotrun.shape.SHAPE`: private, encrypted, TLS only, recoverable."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.nag import acknowledge
from infra.options import StackOptions
from infra.shape_tags import mark
from spotrun.model.layout import JOBS_PREFIX, MANIFEST_PREFIX
from spotrun.shape import BucketSpec, DeploymentShape, TableSpec


class Storage(Construct):
    """Every bucket and table the shape declares, by logical name.

    Attributes
    ----------
    buckets
        Logical name -> bucket.
    tables
        Logical name -> table.
    """

    def __init__(self, scope: Construct, construct_id: str, *, shape: DeploymentShape, options: StackOptions):
        super().__init__(scope, construct_id)
        access_logs = (
            s3.Bucket.from_bucket_name(self, "AccessLogs", options.access_logs_bucket)
            if options.access_logs_bucket
            else None
        )
        self.buckets = {spec.logical_name: self._bucket(spec, options, access_logs) for spec in shape.buckets}
        self.tables = {spec.logical_name: self._table(spec) for spec in shape.tables}

    def _bucket(self, spec: BucketSpec, options: StackOptions, access_logs: s3.IBucket | None) -> s3.Bucket:
        bucket = s3.Bucket(
            self,
            f"{_pascal(spec.logical_name)}Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=spec.versioned,
            lifecycle_rules=_lifecycle(spec, options),
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix=f"spotrun/{spec.logical_name}/" if access_logs else None,
            # Job data and archived models outlive the stack: `cdk destroy` leaves both buckets behind.
            removal_policy=RemovalPolicy.RETAIN,
        )
        if spec.eventbridge_notifications:
            # Set on the bucket itself: the L2 `event_bridge_enabled` would add a custom-resource Lambda that
            # exists in no shape (and that the drift test would rightly flag).
            cfn = bucket.node.default_child
            assert isinstance(cfn, s3.CfnBucket)
            cfn.add_property_override(
                "NotificationConfiguration.EventBridgeConfiguration.EventBridgeEnabled", True
            )
        if access_logs is None:
            acknowledge(
                bucket,
                "AwsSolutions-S1",
                "Server access logs need a bucket of their own, which the deployment shape (shared with the "
                "emulator) does not declare; logging each spotrun bucket into the other would loop. Set the "
                "context key access_logs_bucket to an existing log bucket to turn them on; object-level API calls "
                "can also be audited with CloudTrail data events.",
            )
        mark(bucket, "bucket", spec.logical_name)
        return bucket

    def _table(self, spec: TableSpec) -> dynamodb.Table:
        table = dynamodb.Table(
            self,
            f"{_pascal(spec.logical_name)}Table",
            partition_key=dynamodb.Attribute(name=spec.partition_key, type=dynamodb.AttributeType.STRING),
            sort_key=(
                dynamodb.Attribute(name=spec.sort_key, type=dynamodb.AttributeType.STRING)
                if spec.sort_key
                else None
            ),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=spec.ttl_attribute,
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        for index_name, partition, sort in spec.global_indexes:
            table.add_global_secondary_index(
                index_name=index_name,
                partition_key=dynamodb.Attribute(name=partition, type=dynamodb.AttributeType.STRING),
                sort_key=dynamodb.Attribute(name=sort, type=dynamodb.AttributeType.STRING) if sort else None,
                projection_type=dynamodb.ProjectionType.ALL,
            )
        mark(table, "table", spec.logical_name)
        return table


def _lifecycle(spec: BucketSpec, options: StackOptions) -> list[s3.LifecycleRule]:
    """Lifecycle of a bucket: the jobs bucket sheds old checkpoints, every bucket sheds stale uploads."""
    rules = [
        s3.LifecycleRule(
            id="abort-incomplete-uploads",
            abort_incomplete_multipart_upload_after=Duration.days(2),
        )
    ]
    if spec.logical_name == "jobs":
        rules += [
            s3.LifecycleRule(
                # The agent keeps the last `keep_last` checkpoints and deletes older ones; in a versioned bucket
                # a deleted checkpoint stays as a non-current version, which this rule removes for good.
                id="expire-superseded-checkpoints",
                prefix=JOBS_PREFIX,
                noncurrent_version_expiration=Duration.days(options.superseded_checkpoint_days),
                expired_object_delete_marker=True,
            ),
            s3.LifecycleRule(
                # Working data of finished jobs (checkpoints, logs, outputs already archived) expires.
                id="expire-old-job-data",
                prefix=JOBS_PREFIX,
                expiration=Duration.days(options.job_data_retention_days),
            ),
            s3.LifecycleRule(
                id="expire-replaced-manifests",
                prefix=MANIFEST_PREFIX,
                noncurrent_version_expiration=Duration.days(30),
            ),
        ]
    else:
        rules.append(
            s3.LifecycleRule(
                # Archived models are written straight into their Glacier class by the archive function; a
                # replaced archive version is kept 90 days (Glacier's minimum storage duration) then removed.
                id="expire-replaced-archives",
                noncurrent_version_expiration=Duration.days(90),
            )
        )
    return rules


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.replace("-", "_").split("_"))

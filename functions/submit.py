"""Lambda: a manifest was dropped into the jobs bucket (S3 Object Created, through EventBridge)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from spotrun.aws.adapters import S3Objects, StepFunctionsWorkflows, job_store
from spotrun.aws.settings import Settings
from spotrun.control.submission import submit_s3_manifest
from spotrun.model.job import ManifestSource, utc_now
from spotrun.model.layout import is_manifest_key
from spotrun.model.manifest_io import MAX_MANIFEST_BYTES
from spotrun.shape import METRICS_NAMESPACE, SERVICE_NAME

logger = Logger(service=SERVICE_NAME)
tracer = Tracer(service=SERVICE_NAME)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@event_parser(model=S3EventNotificationEventBridgeModel)
def handler(event: S3EventNotificationEventBridgeModel, context: LambdaContext) -> dict[str, Any]:
    settings = Settings.from_env()
    bucket, key = event.detail.bucket.name, event.detail.object.key
    if not is_manifest_key(key):
        return {"outcome": "ignored", "reason": f"{key} is not a manifest"}
    objects = S3Objects(settings.region)
    source = ManifestSource(kind="s3", bucket=bucket, key=key, etag=event.detail.object.etag)
    # S3's event carries the object's size (detail.object.size, see
    # https://docs.aws.amazon.com/AmazonS3/latest/userguide/ev-events.html; moto sends it too): a manifest past
    # the limit is refused without being read.
    size = int(event.detail.object.size or 0)
    outcome = submit_s3_manifest(
        source=source,
        body=objects.get_bytes(bucket, key) if size <= MAX_MANIFEST_BYTES else None,
        size=size,
        store=job_store(settings.jobs_table, settings.region, settings.event_bus_name),
        objects=objects,
        workflows=StepFunctionsWorkflows(settings.region),
        state_machine_arn=settings.state_machine_arn,
        time_scale=settings.time_scale,
        archive_buckets=settings.allowed_archive_buckets,
        now=utc_now(),
    )
    logger.info("manifest handled", extra={"key": key, **outcome.model_dump(exclude_none=True)})
    metrics.add_metric(name=f"Jobs{outcome.outcome.capitalize()}", unit=MetricUnit.Count, value=1)
    return outcome.model_dump(mode="json")

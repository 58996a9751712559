"""Lambda: a manifest was dropped into the jobs bucket (S3 Object Created, through EventBridge)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel

from functions.runtime import Ports, function_handler, logger, metrics
from spotrun.control.submission import submit_s3_manifest
from spotrun.model.job.record import ManifestSource, utc_now
from spotrun.model.layout import is_manifest_key
from spotrun.model.manifest.parse import MAX_MANIFEST_BYTES


@function_handler(S3EventNotificationEventBridgeModel)
def handler(event: S3EventNotificationEventBridgeModel, aws: Ports) -> dict[str, Any]:
    bucket, key = event.detail.bucket.name, event.detail.object.key
    if not is_manifest_key(key):
        return {"outcome": "ignored", "reason": f"{key} is not a manifest"}
    source = ManifestSource(kind="s3", bucket=bucket, key=key, etag=event.detail.object.etag)
    # S3's event carries the object's size (detail.object.size, see
    # https://docs.aws.amazon.com/AmazonS3/latest/userguide/ev-events.html; moto sends it too): a manifest past
    # the limit is refused without being read.
    size = int(event.detail.object.size or 0)
    outcome = submit_s3_manifest(
        source=source,
        body=aws.objects.get_bytes(bucket, key) if size <= MAX_MANIFEST_BYTES else None,
        size=size,
        store=aws.store,
        objects=aws.objects,
        workflows=aws.workflows,
        state_machine_arn=aws.settings.state_machine_arn,
        time_scale=aws.settings.time_scale,
        archive_buckets=aws.settings.allowed_archive_buckets,
        secret_references=aws.settings.reference_patterns,
        now=utc_now(),
    )
    logger.info("manifest handled", extra={"key": key, **outcome.model_dump(exclude_none=True)})
    metrics.add_metric(name=f"Jobs{outcome.outcome.capitalize()}", unit=MetricUnit.Count, value=1)
    return outcome.model_dump(mode="json")

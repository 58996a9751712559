"""Lambda: archive the trained model in the manifest's Glacier storage class."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

from spotrun.aws.adapters import S3Objects, job_store
from spotrun.aws.settings import Settings
from spotrun.control.archive import archive_model
from spotrun.model.command import TrainResult
from spotrun.model.job import utc_now
from spotrun.shape import METRICS_NAMESPACE, SERVICE_NAME

logger = Logger(service=SERVICE_NAME)
tracer = Tracer(service=SERVICE_NAME)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)


class ArchiveRequest(BaseModel):
    job_id: str
    trained: TrainResult


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@event_parser(model=ArchiveRequest)
def handler(event: ArchiveRequest, context: LambdaContext) -> dict[str, Any]:
    settings = Settings.from_env()
    archived = archive_model(
        job_id=event.job_id,
        trained=event.trained,
        store=job_store(settings.jobs_table, settings.region, settings.event_bus_name),
        objects=S3Objects(settings.region),
        jobs_bucket=settings.jobs_bucket,
        archive_bucket=settings.archive_bucket,
        now=utc_now(),
    )
    metrics.add_metric(name="ArchivedBytes", unit=MetricUnit.Bytes, value=sum(item.size for item in archived))
    logger.info("model archived", extra={"job_id": event.job_id, "objects": len(archived)})
    # A count, not the list: the result enters the workflow state, which Step Functions caps at 256 KiB.
    return {"objects": len(archived), "bytes": sum(item.size for item in archived)}

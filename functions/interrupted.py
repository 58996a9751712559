"""Lambda: the job's capacity went away; record the attempt's end and the work lost, release the instance."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

from spotrun.aws.adapters import Ec2Compute, S3Objects, job_store
from spotrun.aws.settings import Settings
from spotrun.control.interruptions import record_interruption
from spotrun.model.job import utc_now
from spotrun.shape import METRICS_NAMESPACE, SERVICE_NAME

logger = Logger(service=SERVICE_NAME)
tracer = Tracer(service=SERVICE_NAME)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)


class InterruptedRequest(BaseModel):
    job_id: str
    error: dict[str, Any]


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@event_parser(model=InterruptedRequest)
def handler(event: InterruptedRequest, context: LambdaContext) -> dict[str, Any]:
    settings = Settings.from_env()
    record = record_interruption(
        job_id=event.job_id,
        error=event.error,
        store=job_store(settings.jobs_table, settings.region, settings.event_bus_name),
        compute=Ec2Compute(settings.region),
        objects=S3Objects(settings.region),
        jobs_bucket=settings.jobs_bucket,
        now=utc_now(),
    )
    metrics.add_dimension(name="Reason", value=record.reason)
    metrics.add_metric(name="Interruptions", unit=MetricUnit.Count, value=1)
    if record.steps_lost is not None:
        metrics.add_metric(name="StepsLost", unit=MetricUnit.Count, value=record.steps_lost)
    logger.info("interruption recorded", extra={"job_id": event.job_id, **record.model_dump()})
    return record.model_dump(mode="json")

"""Lambda: record the job's outcome, error and cost."""

from __future__ import annotations

from typing import Any, Literal

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

from spotrun.aws.adapters import job_store
from spotrun.aws.schedules import DynamoRunRecords
from spotrun.aws.settings import Settings
from spotrun.control.finalize import finalize_job
from spotrun.control.schedules import promote_success
from spotrun.model.job import utc_now
from spotrun.shape import METRICS_NAMESPACE, SERVICE_NAME

logger = Logger(service=SERVICE_NAME)
tracer = Tracer(service=SERVICE_NAME)
metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)


class FinalizeRequest(BaseModel):
    job_id: str
    outcome: Literal["SUCCEEDED", "FAILED"]
    error: dict[str, Any] | None = None


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@event_parser(model=FinalizeRequest)
def handler(event: FinalizeRequest, context: LambdaContext) -> dict[str, Any]:
    settings = Settings.from_env()
    job = finalize_job(
        job_id=event.job_id,
        outcome=event.outcome,
        error=event.error,
        store=job_store(settings.jobs_table, settings.region, settings.event_bus_name),
        now=utc_now(),
    )
    # A scheduled job that succeeded makes its inputs the ones a later firing compares with.
    promote_success(job, DynamoRunRecords(settings.jobs_table, settings.region))
    metrics.add_metric(name=f"Jobs{job.status.value.capitalize()}", unit=MetricUnit.Count, value=1)
    if job.cost is not None:
        metrics.add_metric(name="JobCostUSD", unit=MetricUnit.NoUnit, value=job.cost.usd)
    logger.info("job finished", extra={"job_id": job.job_id, "status": job.status.value})
    return {"job_id": job.job_id, "status": job.status.value}

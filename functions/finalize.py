"""Lambda: record the job's outcome, error and cost."""

from __future__ import annotations

from typing import Any, Literal

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import logger, metrics, parse_event, ports, tracer
from spotrun.control.finalize import finalize_job
from spotrun.control.schedules.run_records import promote_success
from spotrun.model.deferred import DeferredModel
from spotrun.model.job.record import utc_now


class FinalizeRequest(DeferredModel):
    job_id: str
    outcome: Literal["SUCCEEDED", "FAILED"]
    error: dict[str, Any] | None = None


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@parse_event(FinalizeRequest)
def handler(event: FinalizeRequest, context: LambdaContext) -> dict[str, Any]:
    aws = ports("finalize")
    job = finalize_job(
        job_id=event.job_id,
        outcome=event.outcome,
        error=event.error,
        store=aws.store,
        now=utc_now(),
    )
    # A scheduled job that succeeded makes its inputs the ones a later firing compares with.
    promote_success(job, aws.run_records)
    metrics.add_metric(name=f"Jobs{job.status.value.capitalize()}", unit=MetricUnit.Count, value=1)
    if job.cost is not None:
        metrics.add_metric(name="JobCostUSD", unit=MetricUnit.NoUnit, value=job.cost.usd)
    logger.info("job finished", extra={"job_id": job.job_id, "status": job.status.value})
    return {"job_id": job.job_id, "status": job.status.value}

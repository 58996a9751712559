"""Lambda: record the job's outcome, error and cost."""

from __future__ import annotations

from typing import Any, Literal

from aws_lambda_powertools.metrics import MetricUnit

from functions.runtime import Ports, function_handler, logger, metrics
from spotrun.control.finalize import finalize_job
from spotrun.control.schedules.run_records import promote_success
from spotrun.model.base import DeferredModel
from spotrun.model.job.record import utc_now


class FinalizeRequest(DeferredModel):
    job_id: str
    outcome: Literal["SUCCEEDED", "FAILED"]
    error: dict[str, Any] | None = None


@function_handler(FinalizeRequest)
def handler(request: FinalizeRequest, aws: Ports) -> dict[str, Any]:
    job = finalize_job(
        job_id=request.job_id,
        outcome=request.outcome,
        error=request.error,
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

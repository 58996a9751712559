"""Lambda: the job's capacity went away; record the attempt's end and the work lost, release the instance."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from functions.runtime import Ports, function_handler, logger, metrics
from spotrun.control.capacity.interruptions import record_interruption
from spotrun.model.base import DeferredModel
from spotrun.model.job.record import utc_now


class InterruptedRequest(DeferredModel):
    job_id: str
    error: dict[str, Any]


@function_handler(InterruptedRequest)
def handler(request: InterruptedRequest, aws: Ports) -> dict[str, Any]:
    record = record_interruption(
        job_id=request.job_id,
        error=request.error,
        store=aws.store,
        compute=aws.compute,
        objects=aws.objects,
        jobs_bucket=aws.settings.jobs_bucket,
        now=utc_now(),
        keep_healthy_nodes=aws.settings.keep_healthy_nodes,
    )
    if record.failed:
        logger.info("training failed: not a lost node", extra={"job_id": request.job_id})
        return record.model_dump(mode="json")
    metrics.add_dimension(name="Reason", value=record.reason)
    metrics.add_metric(name="Interruptions", unit=MetricUnit.Count, value=1)
    if record.steps_lost is not None:
        metrics.add_metric(name="StepsLost", unit=MetricUnit.Count, value=record.steps_lost)
    logger.info("interruption recorded", extra={"job_id": request.job_id, **record.model_dump()})
    return record.model_dump(mode="json")

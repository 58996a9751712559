"""Lambda: the job's capacity went away; record the attempt's end and the work lost, release the instance."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import logger, metrics, parse_event, ports, tracer
from spotrun.control.capacity.interruptions import record_interruption
from spotrun.model.deferred import DeferredModel
from spotrun.model.job.record import utc_now


class InterruptedRequest(DeferredModel):
    job_id: str
    error: dict[str, Any]


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@parse_event(InterruptedRequest)
def handler(event: InterruptedRequest, context: LambdaContext) -> dict[str, Any]:
    aws = ports("interrupted")
    record = record_interruption(
        job_id=event.job_id,
        error=event.error,
        store=aws.store,
        compute=aws.compute,
        objects=aws.objects,
        jobs_bucket=aws.settings.jobs_bucket,
        now=utc_now(),
    )
    metrics.add_dimension(name="Reason", value=record.reason)
    metrics.add_metric(name="Interruptions", unit=MetricUnit.Count, value=1)
    if record.steps_lost is not None:
        metrics.add_metric(name="StepsLost", unit=MetricUnit.Count, value=record.steps_lost)
    logger.info("interruption recorded", extra={"job_id": event.job_id, **record.model_dump()})
    return record.model_dump(mode="json")

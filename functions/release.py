"""Lambda: terminate every instance of the job (on success and on every failure path)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import logger, metrics, parse_event, ports, tracer
from spotrun.control.capacity.release import release_for_workflow
from spotrun.model.deferred import DeferredModel
from spotrun.model.job.record import utc_now


class ReleaseRequest(DeferredModel):
    job_id: str
    reason: str


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@parse_event(ReleaseRequest)
def handler(event: ReleaseRequest, context: LambdaContext) -> dict[str, Any]:
    aws = ports("release")
    terminated = release_for_workflow(
        job_id=event.job_id,
        reason=event.reason,
        store=aws.store,
        compute=aws.compute,
        now=utc_now(),
    )
    logger.info(
        "capacity released", extra={"job_id": event.job_id, "instances": terminated, "reason": event.reason}
    )
    return {"terminated": terminated}

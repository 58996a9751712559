"""Lambda: is the job's instance running, and its SSM agent online, yet?"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import logger, metrics, parse_event, ports, tracer
from spotrun.control.capacity.readiness import await_ready
from spotrun.model.deferred import DeferredModel
from spotrun.model.job.record import utc_now
from spotrun.model.timing import WorkflowTiming


class ReadyRequest(DeferredModel):
    job_id: str
    timing: WorkflowTiming


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics(raise_on_empty_metrics=False)
@parse_event(ReadyRequest)
def handler(event: ReadyRequest, context: LambdaContext) -> dict[str, Any]:
    aws = ports("instance_ready")
    report = await_ready(
        job_id=event.job_id,
        store=aws.store,
        compute=aws.compute,
        commands=aws.commands,
        timing=event.timing,
        clock=utc_now,
        sleep=time.sleep,
    )
    logger.info("instance state", extra={"job_id": event.job_id, **report.model_dump()})
    return report.model_dump(mode="json")

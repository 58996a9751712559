"""Lambda: is the job's instance running, and its SSM agent online, yet?"""

from __future__ import annotations

import time
from typing import Any

from functions.runtime import Ports, function_handler, logger
from spotrun.control.capacity.readiness import await_ready
from spotrun.model.base import DeferredModel
from spotrun.model.job.record import utc_now
from spotrun.model.timing import WorkflowTiming


class ReadyRequest(DeferredModel):
    job_id: str
    timing: WorkflowTiming


@function_handler(ReadyRequest)
def handler(request: ReadyRequest, aws: Ports) -> dict[str, Any]:
    report = await_ready(
        job_id=request.job_id,
        store=aws.store,
        compute=aws.compute,
        commands=aws.commands,
        timing=request.timing,
        clock=utc_now,
        sleep=time.sleep,
    )
    logger.info("instance state", extra={"job_id": request.job_id, **report.model_dump()})
    return report.model_dump(mode="json")

"""Lambda: terminate every instance of the job (on success and on every failure path)."""

from __future__ import annotations

from typing import Any

from functions.runtime import Ports, function_handler, logger
from spotrun.control.capacity.release import release_for_workflow
from spotrun.model.base import DeferredModel
from spotrun.model.job.record import utc_now


class ReleaseRequest(DeferredModel):
    job_id: str
    reason: str


@function_handler(ReleaseRequest)
def handler(request: ReleaseRequest, aws: Ports) -> dict[str, Any]:
    terminated = release_for_workflow(
        job_id=request.job_id,
        reason=request.reason,
        store=aws.store,
        compute=aws.compute,
        now=utc_now(),
    )
    logger.info(
        "capacity released",
        extra={"job_id": request.job_id, "instances": terminated, "reason": request.reason},
    )
    return {"terminated": terminated}

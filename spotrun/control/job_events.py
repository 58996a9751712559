"""Job status changes, published on the deployment's EventBridge bus so other systems can react.

The job store publishes (see :class:`spotrun.aws.job_store.DynamoJobStore`): after a conditional write
succeeded and only when the status differs from the one it replaced, so a retried write never publishes twice.
The task token is never part of an event. Publishing is best effort: a failure is logged, never raised.
"""

from __future__ import annotations

import logging
from typing import Any

from spotrun.control.ports import Events
from spotrun.model.job.bus_events import STATUS_CHANGE
from spotrun.model.job.record import Job, JobStatus

logger = logging.getLogger(__name__)


def status_change_detail(job: Job, previous: JobStatus | None) -> dict[str, Any]:
    """The ``detail`` of a status change event (JSON-able).

    Parameters
    ----------
    job
        The job as written, in its new status.
    previous
        The status it replaced; None for a new job.

    Returns
    -------
    dict
        ``{job_id, name, status, previous_status, at, attempt, error?}``.
    """
    attempt = job.current_attempt
    detail: dict[str, Any] = {
        "job_id": job.job_id,
        "name": job.name,
        "status": job.status.value,
        "previous_status": None if previous is None else previous.value,
        "at": job.updated_at.isoformat(),
        "attempt": None
        if attempt is None
        else {
            "number": attempt.number,
            "instance_id": attempt.instance_id,
            "instance_type": attempt.instance_type,
            "lifecycle": attempt.lifecycle,
        },
    }
    if job.error is not None:
        detail["error"] = {"type": job.error.type, "message": job.error.message}
    return detail


def publish_status_change(events: Events, job: Job, previous: JobStatus | None) -> None:
    """Publish one status change; log and swallow any failure."""
    try:
        events.publish(STATUS_CHANGE, status_change_detail(job, previous))
    except Exception:  # publishing must never fail the write that happened
        logger.exception("could not publish the status change of job %s", job.job_id)

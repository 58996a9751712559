"""Job status changes and deadline decisions, published on the deployment's EventBridge bus so others can react.

The job store publishes (see :class:`spotrun.aws.job_store.DynamoJobStore`) after a conditional write succeeded,
and only when the write changed what the event reports (the status; a deadline job's newest lifecycle choice)
against the document it replaced, so a retried write never publishes twice. The task token is never part of an
event. Each event carries a ``headline``, one line a person reads (a notification's text, :mod:`spotrun.notifications`),
safe to place in an input template as it is (:func:`spotrun.model.job.bus_events.safe_text`). Publishing is best
effort: a failure is logged, never raised.
"""

from __future__ import annotations

import logging
from typing import Any

from spotrun.control.ports import Events
from spotrun.model.job.bus_events import DEADLINE_DECISION, STATUS_CHANGE, safe_text
from spotrun.model.job.record import Job, JobStatus

logger = logging.getLogger(__name__)


def status_headline(job: Job) -> str:
    """One line saying what the job's status means, e.g. ``Job bert (j-1) FAILED on attempt 2: Budget.Exceeded``."""
    attempt = job.current_attempt
    where = ""
    if attempt is not None:
        machine = f"{attempt.instance_type} {attempt.lifecycle}, {attempt.availability_zone}"
        where = f" on attempt {attempt.number} ({machine})"
    text = f"Job {job.name} ({job.job_id}) {job.status.value}{where}"
    if job.status is JobStatus.INTERRUPTED:
        text += "; spotrun resumes it from its last checkpoint"
    if job.error is not None:
        text += f": {job.error.type}"
    return safe_text(text)


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
        ``{job_id, name, status, previous_status, at, attempt, error?, headline}``.
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
        "headline": status_headline(job),
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


def deadline_decision_detail(job: Job, previous_choice: str) -> dict[str, Any]:
    """The ``detail`` of a deadline decision event: the job's newest decision, which changed its choice.

    Parameters
    ----------
    job
        The job as written; its ``deadline_decisions`` is not empty.
    previous_choice
        The choice of the newest decision in the document this write replaced.

    Returns
    -------
    dict
        ``{job_id, name, at, choice, previous_choice, slack_hours, reason, headline}``.
    """
    decision = job.deadline_decisions[-1]
    slack = "" if decision.slack_hours is None else f" with {decision.slack_hours:.1f} h of slack"
    return {
        "job_id": job.job_id,
        "name": job.name,
        "at": decision.at.isoformat(),
        "choice": decision.choice,
        "previous_choice": previous_choice,
        "slack_hours": decision.slack_hours,
        "reason": decision.reason,
        "headline": safe_text(
            f"Job {job.name} ({job.job_id}) deadline policy moved it from {previous_choice} to "
            f"{decision.choice}{slack}"
        ),
    }


def publish_deadline_decision(events: Events, job: Job, previous_choice: str | None) -> None:
    """Publish the job's newest deadline decision when its choice differs from ``previous_choice``.

    Nothing is published without a previous decision (the first one starts the job, as its status change says)
    or when the choice stayed the same. A failure is logged and swallowed.
    """
    if not job.deadline_decisions or previous_choice is None:
        return
    if job.deadline_decisions[-1].choice == previous_choice:
        return
    try:
        events.publish(DEADLINE_DECISION, deadline_decision_detail(job, previous_choice))
    except Exception:  # publishing must never fail the write that happened
        logger.exception("could not publish the deadline decision of job %s", job.job_id)

"""The figures people read in ``spotrun list`` and ``spotrun status``: where a job stands while it runs.

One home for them: the list's line (:func:`summary_figures`) and the running job's progress (:func:`job_progress`),
both computed from the record and, for the progress, from what the agent wrote in the jobs bucket (its progress
document and the checkpoints' commit markers). No rendering here: the API returns them, the CLI shows them.
"""

from __future__ import annotations

import contextlib
import json
import logging
from datetime import datetime
from typing import Any

from pydantic import Field, ValidationError

from spotrun.control.ports import Objects
from spotrun.model.base import DeferredModel
from spotrun.model.capacity.pricing import job_cost
from spotrun.model.job.record import Job
from spotrun.model.layout import checkpoints_prefix, commit_marker_key, progress_key

logger = logging.getLogger(__name__)


class JobProgress(DeferredModel):
    """Where a job that has not ended stands: its step, its last committed checkpoint, what it cost so far."""

    attempt: int | None = Field(default=None, description="The attempt running now; None before the first.")
    step: int | None = Field(default=None, description="The last step the running attempt reported.")
    step_reported_at: datetime | None = None
    checkpoint_step: int | None = Field(default=None, description="The job's latest committed checkpoint.")
    checkpoint_committed_at: datetime | None = None
    cost_usd: float = Field(description="What its instances cost so far, USD (running ones up to now).")


def cost_so_far(job: Job, now: datetime) -> float:
    """What the job's instances cost up to ``now`` (its final cost once it ended), USD."""
    if job.cost is not None:
        return job.cost.usd
    return job_cost(job.billed_instances(), now=now).usd


def summary_figures(job: Job, now: datetime) -> dict[str, Any]:
    """The list's figures of ``job``: its (last) instance, its recoveries, its cost so far and its duration.

    ``recoveries`` counts the attempts after the first: each is the job carried onto a new instance after it
    lost one. The duration runs from submission to the job's end (its last status change), or to ``now``.
    """
    last = job.attempts[-1] if job.attempts else None
    ended = job.timeline[-1].at if job.status.is_terminal and job.timeline else now
    return {
        "instance_type": last.instance_type if last else None,
        "lifecycle": last.lifecycle if last else None,
        "recoveries": max(0, len(job.attempts) - 1),
        "cost_usd": cost_so_far(job, now),
        "duration_seconds": max(0.0, (ended - job.created_at).total_seconds()),
    }


def _read_json(objects: Objects, bucket: str, key: str) -> Any:
    try:
        return json.loads(objects.get_bytes(bucket, key))
    except Exception as exc:  # not written yet, or unreadable: the figure is unknown, the view still answers
        logger.info("no readable %s: %r", key, exc)
        return None


def reported_step(
    objects: Objects, jobs_bucket: str, job_id: str, attempt: int
) -> tuple[int, datetime] | None:
    """The step an attempt last reported and when the agent read it (its progress document), or None.

    None when the document is missing (a script that reports no steps, or none yet) or not of its shape.
    """
    reported = _read_json(objects, jobs_bucket, progress_key(job_id, attempt))
    try:
        step, at = reported["step"], datetime.fromisoformat(reported["updated_at"])
    except (TypeError, KeyError, ValueError):
        return None
    if not isinstance(step, int) or isinstance(step, bool) or step < 0 or at.tzinfo is None:
        return None
    return step, at


def job_progress(job: Job, *, objects: Objects, jobs_bucket: str, now: datetime) -> JobProgress | None:
    """The progress of a job that has not ended (None once it has).

    Parameters
    ----------
    job
        The stored job.
    objects
        The jobs bucket, where the agent writes its progress document and the checkpoints.
    jobs_bucket
        Its name.
    now
        The end of the instances still running, for the cost so far.
    """
    # Imported here: only this view (a running job's GET /jobs/{id}) reads checkpoints. The users' API imports
    # this module at every cold start for the job views' figures; their reader loads at the first such request.
    from spotrun.model.agent_protocol.checkpoints import CommitMarker, group_checkpoint_keys

    if job.status.is_terminal:
        return None
    running = next((a for a in reversed(job.attempts) if a.ended_at is None), None)
    progress: dict[str, Any] = {"cost_usd": cost_so_far(job, now)}
    if running is not None:
        progress["attempt"] = running.number
        reported = _read_json(objects, jobs_bucket, progress_key(job.job_id, running.number))
        if isinstance(reported, dict):
            progress["step"] = reported.get("step")
            progress["step_reported_at"] = reported.get("updated_at")
    keys = [key for key, _ in objects.list_keys(jobs_bucket, checkpoints_prefix(job.job_id))]
    committed = [c.step for c in group_checkpoint_keys(job.job_id, keys) if c.committed]
    if committed:
        marker = _read_json(objects, jobs_bucket, commit_marker_key(job.job_id, max(committed)))
        progress["checkpoint_step"] = max(committed)
        with contextlib.suppress(
            ValidationError
        ):  # a marker of another shape: the step is known, not its time
            progress["checkpoint_committed_at"] = CommitMarker.model_validate(marker).committed_at
    try:
        return JobProgress.model_validate(progress)
    except ValidationError as exc:  # a hand-written progress document: show what is sure
        logger.info("job %s: progress document unusable: %r", job.job_id, exc)
        return JobProgress(attempt=progress.get("attempt"), cost_usd=progress["cost_usd"])

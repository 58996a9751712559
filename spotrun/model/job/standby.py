"""Standby instances that never hosted an attempt: EC2 bills them, so the job record keeps them.

A standby is launched on an interruption warning so that the next attempt's boot overlaps the checkpoint upload.
When it is not adopted (the job ends first, it was reclaimed before the next attempt, or it lost a race with
another standby), it still ran from its launch to its termination, and
:func:`spotrun.model.capacity.pricing.job_cost` must count it: these pure functions move it into
``Job.unused_instances`` with the time it ended.
"""

from __future__ import annotations

from datetime import datetime

from spotrun.model.job.attempt import END_UNUSED_STANDBY, Attempt
from spotrun.model.job.record import Job

# How long a warning's standby launch may stay in flight: the ec2_events function's timeout (spotrun.shape). A
# reservation older than that was left by an invocation that ended without clearing it.
STANDBY_LAUNCH_SECONDS = 60.0


def standby_in_flight(job: Job, now: datetime) -> bool:
    """Whether the warning's standby is being launched at ``now`` (reserved, not stored yet): the next
    acquisition waits for it rather than launch a second replacement."""
    since = job.standby_launching_at
    return (
        job.standby is None and since is not None and (now - since).total_seconds() < STANDBY_LAUNCH_SECONDS
    )


def keep_unused(job: Job, instance: Attempt, now: datetime) -> Job:
    """Record ``instance`` as having run for the job without hosting an attempt, ended ``now``.

    Idempotent: an instance already recorded is left as it is.
    """
    if any(kept.instance_id == instance.instance_id for kept in job.unused_instances):
        return job
    ended = instance.model_copy(update={"ended_at": now, "end_reason": END_UNUSED_STANDBY})
    return job.model_copy(update={"unused_instances": [*job.unused_instances, ended]})


def retire_standby(job: Job, now: datetime, *, adopted: str | None = None) -> Job:
    """Clear the job's standby; unless it is the instance ``adopted`` by the next attempt, keep it as unused.

    Parameters
    ----------
    job
        The record.
    now
        When the standby stopped counting for the job (it is being, or has been, terminated).
    adopted
        The instance id the next attempt runs on, when the standby may be it.

    Returns
    -------
    Job
        The record without a standby.
    """
    standby = job.standby
    if standby is None:
        return job
    cleared = job.model_copy(update={"standby": None})
    if standby.instance_id == adopted:
        return cleared
    return keep_unused(cleared, standby, now)

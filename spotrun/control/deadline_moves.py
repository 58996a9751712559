"""While a job with a deadline trains on spot: decide again, and move it to on-demand when the policy says so.

The hook is the agent's heartbeat (every ``agent_heartbeat_seconds``, 60 s on AWS): the control plane hears
from the job there anyway and holds its record, so re-deciding costs no extra call. A move is an interruption
notice the control plane gives itself: the attempt is marked (``deadline_move``), the agent gets the same
``notice`` command as on EC2's two-minute warning (it checkpoints, commits and ends the step with
``Spot.Interrupted``), and the workflow's usual path records the attempt's end (as ``deadline-move``: no
interruption, the pool is not avoided) and acquires again, where the policy, with the slack now short, buys
on-demand. Back to spot happens at a later acquisition, when the slack allows it.

With ``training.total_steps`` the heartbeat is also where the work is learnt: the step in the attempt's progress
document, with the job's training time up to the moment it was read, goes on the record (``steps_reported``),
which every later decision estimates the work from (:mod:`spotrun.model.deadline_work`), on spot or not.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from spotrun.control.interruptions import notify_agent
from spotrun.control.ports import Commands, JobStore, Objects
from spotrun.control.progress import reported_step
from spotrun.control.store import update_job
from spotrun.model.deadline import Choice, Decision, Running
from spotrun.model.deadline_job import ASSUMED, decide_for_job, with_decision
from spotrun.model.job import Job, JobStatus, StepsReported
from spotrun.model.limits import training_seconds_used


def record_steps(job: Job, *, store: JobStore, objects: Objects, jobs_bucket: str, now: datetime) -> Job:
    """Keep a ``training.total_steps`` deadline job's latest reported step on its record, with its training time.

    Parameters
    ----------
    job
        The job, training.
    store, objects
        Ports to the job store and the jobs bucket (the attempt's progress document).
    jobs_bucket
        The jobs bucket's name.
    now
        When the agent reported: the progress document's time is taken up to it (a clock ahead is no later).

    Returns
    -------
    Job
        The job as stored after (unchanged without a new step).
    """
    manifest, attempt = job.require_manifest(), job.open_attempt
    if manifest.capacity.deadline is None or manifest.training.total_steps is None or attempt is None:
        return job
    found = reported_step(objects, jobs_bucket, job.job_id, attempt.number)
    if found is None or (job.steps_reported is not None and job.steps_reported.steps == found[0]):
        return job
    step, at = found[0], min(found[1], now)
    # The training time up to the report, not to now: the steps since it are not in the count yet.
    reported = StepsReported(steps=step, training_hours=training_seconds_used(job, at) / 3600, at=at)

    def keep(current: Job) -> Job:
        latest = current.steps_reported
        return (
            current
            if latest is not None and latest.at >= at
            else current.model_copy(update={"steps_reported": reported})
        )

    return update_job(store, job.job_id, keep)


def redecide_while_training(
    job_id: str,
    *,
    store: JobStore,
    objects: Objects,
    commands: Commands,
    settings: Any,
    now: datetime,
) -> Decision | None:
    """Decide again for a deadline job training on spot; on ``on-demand``, checkpoint and move it.

    Parameters
    ----------
    job_id
        The job whose agent just reported.
    store, objects, commands
        Ports to the job store, S3 (the command document) and SSM.
    settings
        The deployment's :class:`spotrun.aws.settings.Settings` (region, buckets, document, time scale).
    now
        When the agent reported.

    Returns
    -------
    Decision | None
        The decision, or None when there is none to take (no deadline, not training on spot, or a notice
        already given).
    """
    job = store.get(job_id)
    if job is not None and job.status is JobStatus.TRAINING:
        job = record_steps(job, store=store, objects=objects, jobs_bucket=settings.jobs_bucket, now=now)
    attempt = None if job is None else job.open_attempt
    if (
        job is None
        or attempt is None
        or job.require_manifest().capacity.deadline is None
        or job.status is not JobStatus.TRAINING
        or attempt.lifecycle != "spot"
        or attempt.notice_at is not None
    ):
        return None
    assumed = ASSUMED.scaled(settings.time_scale)
    decision = decide_for_job(job, now, running=Running.SPOT, spot_available=True, assumed=assumed)
    if decision.choice is not Choice.ON_DEMAND:
        return decision
    won = False

    def note(current: Job) -> Job:
        # update_job may call this more than once; the last call is the one whose result stands.
        nonlocal won
        latest = current.open_attempt
        won = latest is not None and latest.number == attempt.number and latest.notice_at is None
        if latest is None or not won:
            return current
        marked = latest.model_copy(update={"notice_at": now, "deadline_move": True})
        return with_decision(current.with_current_attempt(marked), decision, now)

    update_job(store, job_id, note)
    if won:
        notify_agent(job, attempt, objects=objects, commands=commands, settings=settings)
    return decision

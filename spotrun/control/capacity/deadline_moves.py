"""While a job with a deadline trains: decide again, and move it between spot and on-demand when the policy says so.

The hook is the agent's heartbeat (every ``agent_heartbeat_seconds``, 60 s on AWS): the control plane hears
from the job there anyway and holds its record, so re-deciding costs no extra call. A move is an interruption
notice the control plane gives itself: the attempt is marked (``deadline_move``), the agent gets the same
``notice`` command as on EC2's two-minute warning (it checkpoints, commits and ends the step with
``Spot.Interrupted``), and the workflow's usual path records the attempt's end (as ``deadline-move``: no
interruption, the pool is not avoided) and acquires again.

- **Off spot**, when the slack no longer holds what a preemption could take (the margin grows with the attempt's
  time on spot): the next acquisition buys on-demand, as the move decided
  (:func:`spotrun.model.deadline.stored_job.moved_off_spot`), where the simulator's move goes in one step. The move
  saves first (the notice), in the control plane and in the simulator alike: nothing unsaved crosses it.
- **Back to spot**, when the slack and the price pay for the return
  (:func:`spotrun.model.deadline.policies.spotrun_policy` on on-demand; before the work is known, while over
  half the time to the deadline is left): spot's availability is learnt by asking EC2 for it, as at an
  acquisition, and only a function allowed to launch
  instances may ask. So the heartbeat (answered by the API, which may not) puts a
  :class:`~spotrun.model.job.bus_events.ReturnToSpot` request on the deployment's bus, and
  :func:`spotrun.control.capacity.spot_return.return_to_spot` (the ``deadline_return`` function) launches a
  spot standby: when EC2 has none, the job stays on on-demand and nothing is recorded (the simulator's "spot is not
  obtainable"); when it has, the job is moved and the next acquisition adopts the standby, whose boot overlapped
  the checkpoint. EventBridge delivers at least once: a request for an attempt already moved, or ended, does
  nothing.

With ``training.total_steps`` the heartbeat is also where the work is learnt: the step in the attempt's progress
document, with the job's training time up to the moment it was read, goes on the record (``steps_reported``),
which every later decision estimates the work from (:mod:`spotrun.model.deadline.work`), on spot or not.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from spotrun.control.ports import Commands, DeploymentSettings, Events, JobStore, Objects
from spotrun.control.progress import reported_step
from spotrun.control.store import update_job
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.bus_events import RETURN_TO_SPOT, ReturnToSpot
from spotrun.model.job.deadline_record import StepsReported
from spotrun.model.job.limits import training_seconds_used
from spotrun.model.job.record import Job, JobStatus

if TYPE_CHECKING:
    from spotrun.model.deadline.state import Decision


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
    events: Events | None,
    settings: DeploymentSettings,
    now: datetime,
) -> Decision | None:
    """Decide again for a deadline job training: off spot at once, or ask for the return to spot.

    Parameters
    ----------
    job_id
        The job whose agent just reported.
    store, objects, commands, events
        Ports to the job store, S3 (the command document), SSM and the deployment's bus (the return's request;
        None in a deployment without one, where a job moved to on-demand stays there).
    settings
        The deployment's :class:`spotrun.aws.settings.Settings` (region, buckets, document, time scale).
    now
        When the agent reported.

    Returns
    -------
    Decision | None
        The decision (on on-demand, ``spot`` means the return was asked for, not made), or None when there is
        none to take (no deadline, not training, or a notice already given).
    """
    job = store.get(job_id)
    if job is not None and job.status is JobStatus.TRAINING:
        job = record_steps(job, store=store, objects=objects, jobs_bucket=settings.jobs_bucket, now=now)
    attempt = None if job is None else movable_attempt(job)
    if job is None or attempt is None:
        return None
    # Imported here: only a deadline job is decided again. The agents' API reaches this at every training
    # heartbeat, and its cold start then loads the deadline policy only with a deadline job's first heartbeat.
    from spotrun.model.deadline.state import Choice, Running
    from spotrun.model.deadline.stored_job import ASSUMED, decide_for_job

    assumed = ASSUMED.scaled(settings.time_scale)
    if attempt.lifecycle == "on-demand":
        decision = decide_for_job(job, now, running=Running.ON_DEMAND, spot_available=True, assumed=assumed)
        if decision.choice is Choice.SPOT and events is not None:
            request = ReturnToSpot(job_id=job_id, attempt=attempt.number)
            events.publish(RETURN_TO_SPOT, request.model_dump(mode="json"))
        return decision
    decision = decide_for_job(job, now, running=Running.SPOT, spot_available=True, assumed=assumed)
    if decision.choice is Choice.ON_DEMAND:
        move_attempt(
            job,
            attempt,
            decision,
            store=store,
            objects=objects,
            commands=commands,
            settings=settings,
            now=now,
        )
    return decision


def movable_attempt(job: Job) -> Attempt | None:
    """The attempt a deadline may move: training, with no notice given yet (EC2's or the policy's own).

    Parameters
    ----------
    job
        The stored job.

    Returns
    -------
    Attempt | None
        Its open attempt when the job has a deadline, trains and was given no notice; None otherwise.
    """
    attempt = job.open_attempt
    if (
        attempt is None
        or job.require_manifest().capacity.deadline is None
        or job.status is not JobStatus.TRAINING
        or attempt.notice_at is not None
    ):
        return None
    return attempt


def move_attempt(
    job: Job,
    attempt: Attempt,
    decision: Decision,
    *,
    store: JobStore,
    objects: Objects,
    commands: Commands,
    settings: DeploymentSettings,
    now: datetime,
) -> None:
    """Mark ``attempt`` moved and record ``decision``, once; the winner tells the agent to checkpoint and end.

    Parameters
    ----------
    job, attempt
        The deadline job and its :func:`movable_attempt`.
    decision
        The deadline policy's decision that moves it.
    store, objects, commands
        Ports to the job store, S3 (the command document) and SSM.
    settings
        The deployment's :class:`spotrun.aws.settings.Settings`.
    now
        When the move is decided.
    """
    # Imported here: a move is rare (a deadline job the policy moves), and the agents' API, which moves jobs off
    # spot, imports this module for every training heartbeat (the notice also loads the agent's command models).
    from spotrun.control.capacity.ec2_events import notify_agent
    from spotrun.model.deadline.stored_job import with_decision

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

    update_job(store, job.job_id, note)
    if won:
        notify_agent(job, attempt, objects=objects, commands=commands, settings=settings)

"""Acting on lost capacity: EC2's warnings and state changes, and the record of each interruption.

Events may arrive twice, late or out of order. Every action here is therefore guarded by the job record: a
warning is acted on once per attempt, a replacement is launched once per job, and only the workflow (one Catch
per step) starts a new attempt, so however many events arrive, an interruption causes one relaunch.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any, Literal

from spotrun.control.capacity.fleet import GroupSite
from spotrun.control.capacity.readiness import not_visible_yet
from spotrun.control.capacity.standby import launch_standby
from spotrun.control.dispatch import node_group, send_agent_command
from spotrun.control.ports import Commands, Compute, DeploymentSettings, JobStore, Objects, Workflows
from spotrun.control.store import update_job
from spotrun.model.agent_protocol.checkpoints import group_checkpoint_keys
from spotrun.model.agent_protocol.command import (
    TRAINING_HUNG,
    AgentCommand,
    FailureCause,
    read_caught_error,
)
from spotrun.model.base import DeferredModel
from spotrun.model.capacity.ec2_states import GONE_STATES
from spotrun.model.deadline.stored_job import ASSUMED
from spotrun.model.errors import InterruptionsExceeded
from spotrun.model.job.attempt import END_HUNG, Attempt, InterruptionReason
from spotrun.model.job.attempt_end import end_reason, late_warning, steps_lost_fields
from spotrun.model.job.group import close_group
from spotrun.model.job.record import Job, JobStatus, transition
from spotrun.model.layout import checkpoints_prefix, progress_key
from spotrun.model.timing import workflow_timing

# Statuses in which an agent step holds a task token the workflow waits on.
_WAITING_ON_AGENT = frozenset({JobStatus.STAGING, JobStatus.TRAINING})

logger = logging.getLogger(__name__)

LATE_WARNING = "late warning recorded: the attempt lost meanwhile was interrupted"

_REASON_BY_ERROR: dict[str, InterruptionReason] = {
    "Spot.Interrupted": "interrupted",
    "Instance.Lost": "instance-lost",
    "Instance.BootTimeout": "boot-timeout",
    "States.HeartbeatTimeout": "heartbeat-timeout",
    "States.Timeout": "heartbeat-timeout",
}


class EventOutcome(DeferredModel):
    """What an EC2 event changed (for logs and tests)."""

    action: str
    job_id: str | None = None
    instance_id: str
    standby_instance_id: str | None = None


class InterruptionRecord(DeferredModel):
    """What the workflow learns from recording an interruption (or a deadline's move, which is none)."""

    reason: InterruptionReason | Literal["deadline-move", "hung"]
    interruptions: int
    last_step: int | None
    # At the close: the latest committed checkpoint and the steps past it, provisional until the next attempt
    # stages (the job record then holds the settled figure, spotrun.model.job.attempt_end).
    resume_from_step: int | None
    steps_lost: int | None


def _current_attempt_on(job: Job | None, instance_id: str) -> Attempt | None:
    # The open attempt when one of its nodes runs on the instance.
    attempt = None if job is None else job.open_attempt
    return attempt if attempt is not None and attempt.node_on(instance_id) is not None else None


def _warned(attempt: Attempt, instance_id: str) -> bool:
    node = attempt.node_on(instance_id)
    return node is not None and node.notice_at is not None


def on_interruption_warning(
    *,
    instance_id: str,
    store: JobStore,
    compute: Compute,
    objects: Objects,
    commands: Commands,
    settings: DeploymentSettings,
    now: datetime,
) -> EventOutcome:
    """The two-minute warning for one of our instances.

    Records the notice on the attempt, tells the agent through SSM (it also watches IMDS: belt and braces), and
    launches the replacement at once when the deployment overlaps boot with the checkpoint upload. A repeated
    warning for the same attempt does nothing. A warning for an attempt already recorded lost without one (the
    instance's state change handled first) only amends the record: that attempt was interrupted
    (:func:`spotrun.model.job.attempt_end.late_warning`).

    Parameters
    ----------
    instance_id
        The instance EC2 will reclaim.
    store, compute, objects, commands
        Ports to the job store, EC2, S3 and SSM.
    settings
        The deployment's :class:`spotrun.aws.settings.Settings`.
    now
        When the warning was received.

    Returns
    -------
    EventOutcome
        What was done.
    """
    job_id = store.job_for_instance(instance_id)
    job = None if job_id is None else store.get(job_id)
    attempt = _current_attempt_on(job, instance_id)
    lost_unwarned = job is not None and attempt is None and late_warning(job, instance_id, now) is not None
    if (
        job is None
        or (attempt is None and not lost_unwarned)
        or (attempt is not None and job.status.is_terminal)
    ):
        return EventOutcome(
            action="ignored: not the current attempt of an active job", instance_id=instance_id
        )
    if attempt is not None and _warned(attempt, instance_id):
        return EventOutcome(
            action="ignored: warning already handled", job_id=job.job_id, instance_id=instance_id
        )

    won = late = False
    # The standby is reserved with the notice, in the same write: the attempt may end and the workflow acquire
    # before its launch returns, and must then wait for it rather than launch a second replacement.
    overlap = bool(settings.overlap_replacement) and replacement_is_usable(job)

    def note(current: Job) -> Job:
        # update_job may call this more than once; the last call is the one whose result stands.
        nonlocal won, late
        latest = _current_attempt_on(current, instance_id)
        won = latest is not None and not _warned(latest, instance_id)
        if latest is None:
            # The loss was recorded first (its state change handled before this): the record still gets it.
            warned = late_warning(current, instance_id, now)
            late = warned is not None
            return current if warned is None else warned
        node = latest.node_on(instance_id)
        if node is None or node.notice_at is not None:
            return current
        # The group's notice is its first node's; each node keeps its own.
        group_notice = latest.notice_at or now
        noted_attempt = latest.with_node(node.model_copy(update={"notice_at": now}))
        noted = current.with_current_attempt(noted_attempt.model_copy(update={"notice_at": group_notice}))
        first = latest.notice_at is None
        return noted.model_copy(update={"standby_launching_at": now}) if overlap and first else noted

    update_job(store, job.job_id, note)
    if late:
        # Nothing to tell or launch: the instance is gone and the workflow has moved on.
        return EventOutcome(action=LATE_WARNING, job_id=job.job_id, instance_id=instance_id)
    if not won or attempt is None:
        # Another delivery of the same warning got there first: nothing more to do.
        return EventOutcome(
            action="ignored: warning already handled", job_id=job.job_id, instance_id=instance_id
        )
    notify_agent(job, attempt, objects=objects, commands=commands, settings=settings)
    standby = None
    usable = replacement_is_usable(job)
    # One standby per warned attempt: a second node warned in the same group is replaced by the next acquire.
    if overlap and attempt.notice_at is None:
        try:
            standby = launch_standby(
                job_id=job.job_id,
                store=store,
                compute=compute,
                subnet_ids=settings.subnet_ids,
                launch_template_name=settings.launch_template_name,
                now=now,
                assumed=ASSUMED.scaled(settings.time_scale),
                group=GroupSite.of(settings),
            )
        finally:
            # The reservation goes whatever the launch's outcome: the acquisition waiting on it adopts the
            # standby, or launches one itself.
            update_job(store, job.job_id, _reservation_cleared)
    return EventOutcome(
        action="warning recorded" if usable else "warning recorded; no replacement: max_interruptions spent",
        job_id=job.job_id,
        instance_id=instance_id,
        standby_instance_id=None if standby is None else standby.instance_id,
    )


def _reservation_cleared(job: Job) -> Job:
    return job if job.standby_launching_at is None else job.model_copy(update={"standby_launching_at": None})


def replacement_is_usable(job: Job) -> bool:
    """Whether a replacement launched on this warning could host the job's next attempt.

    The interruption the warning announces counts against ``capacity.max_interruptions`` once it is recorded;
    when that makes one too many, the job fails instead of resuming, and a replacement launched now would only
    be started, billed and terminated unused.
    """
    return job.interruptions + 1 <= job.require_manifest().capacity.max_interruptions


def notify_agent(
    job: Job, attempt: Attempt, *, objects: Objects, commands: Commands, settings: DeploymentSettings
) -> None:
    """Send the agent of every node the ``notice`` command: checkpoint, commit and end the step (best effort,
    logged). Every node of a group gets it: all ranks then stop at one step and save there together."""
    manifest = job.require_manifest()
    timing = workflow_timing(manifest, settings.time_scale)
    command = AgentCommand(
        step="notice",
        job_id=job.job_id,
        attempt=attempt.number,
        region=settings.region,
        jobs_bucket=settings.jobs_bucket,
        manifest=manifest,
        heartbeat_seconds=timing.agent_heartbeat_seconds,
        poll_seconds=timing.agent_poll_seconds,
    )
    for node in attempt.node_runs():
        try:
            send_agent_command(
                command.model_copy(update={"group": node_group(job.job_id, attempt, node)}),
                node.instance_id,
                objects=objects,
                commands=commands,
                document_name=settings.agent_document_name,
            )
        except Exception as exc:
            # The warned agent also watches IMDS for the notice: a command that cannot reach one must not stop
            # the others' or the replacement's launch.
            logger.warning(
                "job %s: could not send the interruption notice to the agent on %s: %r",
                job.job_id,
                node.instance_id,
                exc,
            )


def on_rebalance_recommendation(*, instance_id: str, store: JobStore, now: datetime) -> EventOutcome:
    """An elevated risk of interruption: recorded on the attempt (the agent syncs a checkpoint on its own)."""
    job_id = store.job_for_instance(instance_id)
    job = None if job_id is None else store.get(job_id)
    if job is None or _current_attempt_on(job, instance_id) is None:
        return EventOutcome(action="ignored: not the current attempt", instance_id=instance_id)

    def note(current: Job) -> Job:
        latest = _current_attempt_on(current, instance_id)
        node = None if latest is None else latest.node_on(instance_id)
        if latest is None or node is None or node.rebalance_at is not None:
            return current
        noted = latest.with_node(node.model_copy(update={"rebalance_at": now}))
        return current.with_current_attempt(
            noted.model_copy(update={"rebalance_at": latest.rebalance_at or now})
        )

    update_job(store, job.job_id, note)
    return EventOutcome(action="rebalance recorded", job_id=job.job_id, instance_id=instance_id)


def on_instance_state(
    *, instance_id: str, state: str, store: JobStore, workflows: Workflows, now: datetime
) -> EventOutcome:
    """An instance changed state. If the current attempt's instance is gone while an agent step is open, the
    step is failed at once with ``Instance.Lost`` rather than after the heartbeat timeout.
    """
    if state not in GONE_STATES:
        return EventOutcome(action=f"ignored: state {state}", instance_id=instance_id)
    job_id = store.job_for_instance(instance_id)
    job = None if job_id is None else store.get(job_id)
    if job is None or _current_attempt_on(job, instance_id) is None:
        return EventOutcome(action="ignored: not the current attempt", instance_id=instance_id)
    if job.status not in _WAITING_ON_AGENT or not job.task_token:
        return EventOutcome(action="ignored: no agent step open", job_id=job.job_id, instance_id=instance_id)
    cause = FailureCause(
        message=f"instance {instance_id} is {state} (EC2 state-change event) during {job.status}"
    )
    failed = workflows.fail_task(job.task_token, "Instance.Lost", cause.model_dump_json())
    action = "agent step failed: instance lost" if failed else "ignored: the agent step had already ended"
    return EventOutcome(action=action, job_id=job.job_id, instance_id=instance_id)


def record_interruption(
    *,
    job_id: str,
    error: dict[str, Any],
    store: JobStore,
    compute: Compute,
    objects: Objects,
    jobs_bucket: str,
    now: datetime,
    keep_healthy_nodes: bool = True,
) -> InterruptionRecord:
    """Close the attempt whose capacity went away, measure the work it lost, and release its instance.

    A multi-node attempt releases only its lost nodes (:func:`lost_nodes`) and keeps the healthy ones for the
    next attempt (:mod:`spotrun.control.capacity.group`), unless ``keep_healthy_nodes`` is false: then every
    node goes and the whole group is relaunched, as the peers do.

    Parameters
    ----------
    job_id
        The job.
    error
        The ``{"Error", "Cause"}`` the workflow caught (``Spot.Interrupted`` with the agent's cause, a lost
        instance, or a heartbeat timeout).
    store, compute, objects
        Ports to the job store, EC2 and S3.
    jobs_bucket
        Where the job's progress and checkpoints are.
    now
        The current time.
    keep_healthy_nodes
        The deployment's setting: false releases every node of a group (the whole group is relaunched).

    Returns
    -------
    InterruptionRecord
        The reason, the step reached, the step training resumes from and the steps lost.

    Raises
    ------
    InterruptionsExceeded
        When this interruption is one more than the manifest tolerates.
    """
    job = store.get(job_id)
    if job is None or job.current_attempt is None:
        raise InterruptionsExceeded(f"job {job_id} has no attempt to record an interruption on")
    attempt = job.current_attempt
    caught = read_caught_error(error)
    error_name = caught.error or ""
    caught_reason = _REASON_BY_ERROR.get(error_name, "instance-lost")
    hung = error_name == TRAINING_HUNG

    def why(latest: Attempt) -> str:
        return END_HUNG if hung else end_reason(caught_reason, latest)

    reason = why(attempt)
    last_step = None if caught.failure is None else caught.failure.last_step
    if last_step is None:
        last_step = _reported_step(objects, jobs_bucket, job_id, attempt.number)
    # Provisional: the old instance may still commit the checkpoint it took on the warning; the next attempt's
    # staging settles the figure against the checkpoint it restored (spotrun.model.job.attempt_end).
    resume_from = _latest_committed_step(objects, jobs_bucket, job_id)
    lost = steps_lost_fields(attempt, last_step, resume_from, final=False)
    # A group keeps its healthy nodes for the next attempt; one node, or a lost one, is let go.
    if attempt.group and keep_healthy_nodes:
        gone = lost_nodes(attempt, caught_reason, compute, now)
    else:
        gone = set(attempt.instance_ids())
    compute.terminate(sorted(gone))

    def close(current: Job) -> Job:
        nonlocal reason, lost
        latest = current.open_attempt
        if latest is None or latest.number != attempt.number:
            return current
        # From the attempt as stored now: a warning recorded since the first read still makes it "interrupted".
        reason = why(latest)
        lost = steps_lost_fields(latest, last_step, resume_from, final=False)
        # The agent's word that the command died in the middle of its save: the summary says it.
        failed = None if caught.failure is None else caught.failure.save_failed
        closed = latest.model_copy(
            update={"ended_at": now, "end_reason": reason, "save_failed": failed, **lost}
        )
        if closed.group:
            closed = close_group(closed, gone, reason, now)
        where = f"{error_name or reason} at step {last_step}; resumes from step {resume_from or 0}"
        moved = transition(current.with_current_attempt(closed), JobStatus.INTERRUPTED, now, detail=where)
        return moved.model_copy(update={"task_token": None})

    recorded = update_job(store, job_id, close)
    limit = recorded.require_manifest().capacity.max_interruptions
    if recorded.interruptions > limit:
        raise InterruptionsExceeded(
            f"job {job_id} was interrupted {recorded.interruptions} times; the manifest allows {limit}"
        )
    return InterruptionRecord(
        reason=reason,
        interruptions=recorded.interruptions,
        last_step=last_step,
        resume_from_step=resume_from,
        steps_lost=lost["steps_lost"],
    )


def lost_nodes(attempt: Attempt, caught: str, compute: Compute, now: datetime) -> set[str]:
    """The instances of a group attempt that are lost: warned, or no longer pending or running for EC2.

    A heartbeat timeout loses every node (none of their agents answered); a node EC2 does not know yet just
    after its launch is not lost (:func:`not_visible_yet`).
    """
    if caught == "heartbeat-timeout":
        return set(attempt.instance_ids())
    lost = set()
    for node in attempt.node_runs():
        state = compute.instance_state(node.instance_id)
        unknown = state is None and not not_visible_yet(node.started_at, now)
        if (
            node.notice_at is not None
            or unknown
            or (state is not None and state not in ("pending", "running"))
        ):
            lost.add(node.instance_id)
    return lost


def _reported_step(objects: Objects, bucket: str, job_id: str, attempt: int) -> int | None:
    try:
        return int(json.loads(objects.get_bytes(bucket, progress_key(job_id, attempt)))["step"])
    except Exception as exc:
        # No progress written (a script that never reports steps) or unreadable: the steps lost are unknown.
        logger.warning("job %s: no step reported by attempt %d: %r", job_id, attempt, exc)
        return None


def _latest_committed_step(objects: Objects, bucket: str, job_id: str) -> int | None:
    keys = [key for key, _ in objects.list_keys(bucket, checkpoints_prefix(job_id))]
    committed = [
        checkpoint.step for checkpoint in group_checkpoint_keys(job_id, keys) if checkpoint.committed
    ]
    return max(committed) if committed else None

"""EC2's news about a job's instances: the interruption warning, the rebalance recommendation, state changes.

Events may arrive twice, late or out of order. Every action here is therefore guarded by the job record: a
warning is acted on once per node, a replacement is launched once per job, and only the workflow (one Catch per
step) starts a new attempt, so however many events arrive, an interruption causes one relaunch
(:mod:`spotrun.control.capacity.interruptions` records it).
"""

from __future__ import annotations

import logging
from datetime import datetime

from spotrun.control.capacity.fleet import GroupSite
from spotrun.control.capacity.standby import launch_standby
from spotrun.control.dispatch import node_group, send_agent_command
from spotrun.control.ports import Commands, Compute, DeploymentSettings, JobStore, Objects, Workflows
from spotrun.control.store import update_job
from spotrun.model.agent_protocol.command import (
    AgentCommand,
    FailureCause,
)
from spotrun.model.base import DeferredModel
from spotrun.model.capacity.ec2_states import GONE_STATES
from spotrun.model.deadline.stored_job import ASSUMED
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.attempt_end import late_warning
from spotrun.model.job.record import Job, JobStatus
from spotrun.model.timing import workflow_timing

# Statuses in which an agent step holds a task token the workflow waits on.
_WAITING_ON_AGENT = frozenset({JobStatus.STAGING, JobStatus.TRAINING})

logger = logging.getLogger(__name__)

LATE_WARNING = "late warning recorded: the attempt lost meanwhile was interrupted"


class EventOutcome(DeferredModel):
    """What an EC2 event changed (for logs and tests)."""

    action: str
    job_id: str | None = None
    instance_id: str
    standby_instance_id: str | None = None


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

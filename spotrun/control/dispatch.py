"""Sending a step to the instance agent; the task token stays in the job record, never in the command."""

from __future__ import annotations

from datetime import datetime

from spotrun.control.ports import Commands, DeploymentSettings, JobStore, Objects
from spotrun.control.store import update_job
from spotrun.model.agent_protocol.command import (
    AgentCommand,
    GpuIdleWatch,
    NodeGroup,
    StageResult,
    WorkflowStep,
)
from spotrun.model.errors import BudgetExceeded, InstanceLost
from spotrun.model.job.attempt import Attempt, NodeRun
from spotrun.model.job.attempt_end import settle_steps_lost
from spotrun.model.job.group import rendezvous_id, rendezvous_port, step_started
from spotrun.model.job.interruption_rate import pool_rate
from spotrun.model.job.limits import budget_stop_at, train_limits
from spotrun.model.job.record import STEP_STATUS, Job, transition
from spotrun.model.layout import agent_command_key
from spotrun.model.manifest.schema import JobManifest
from spotrun.model.timing import WorkflowTiming


def dispatch_agent_step(
    *,
    job_id: str,
    step: WorkflowStep,
    task_token: str,
    timing: WorkflowTiming,
    staged: StageResult | None,
    store: JobStore,
    objects: Objects,
    commands: Commands,
    settings: DeploymentSettings,
    now: datetime,
) -> str:
    """Record the step, write the agent's command to S3 and send its key to the instance through SSM.

    The task token is kept in the job record only: the agent reports to the API's agent route and the API function
    answers the workflow with the token (:mod:`spotrun.control.agent_reports`). Neither the S3 document nor the
    SSM parameters (kept in SSM's command history) carry it.

    Parameters
    ----------
    job_id, step
        The job and the step the agent must run.
    task_token
        The workflow's token for this step, recorded on the job for the agent route to answer with.
    timing
        How often the agent heartbeats and polls.
    staged
        For ``train``: what staging reported (the checkpoint it restored is recorded on the attempt, and settles
        the steps lost of the attempts before, :func:`spotrun.model.job.attempt_end.settle_steps_lost`).
    store, objects, commands
        Ports to the job store, S3 and SSM.
    settings
        The deployment's :class:`spotrun.aws.settings.Settings` (region, jobs bucket, agent document, and
        ``agent_report_url``: the API's agent route).
    now
        The current time.

    Returns
    -------
    str
        The SSM command id (node 0's, for a group: each node gets its own command).

    Raises
    ------
    BudgetExceeded, MaxRuntimeExceeded
        When the job's budget or training time is used up before the step could start.
    """
    job = store.get(job_id)
    attempt = None if job is None else job.open_attempt
    if job is None or attempt is None:
        raise InstanceLost(f"job {job_id} has no instance to run {step} on")
    margin = timing.budget_margin_seconds
    limits = train_limits(job, attempt, margin_seconds=margin, now=now) if step == "train" else None
    stop_at = limits.stop_at if limits else None
    if step == "stage":
        # Also the stage step's: training.setup may run for long, billed like training, and stops there.
        stop_at = budget_stop_at(job, attempt, margin_seconds=margin, now=now)
        if stop_at is not None and stop_at <= now:
            raise BudgetExceeded(f"job {job_id} would pass its budget.max_usd before staging could start")

    def record(current: Job) -> Job:
        moved = transition(current, STEP_STATUS[step], now, detail=step_detail(attempt.instance_id, staged))
        moved = moved.model_copy(update={"task_token": task_token})
        last = moved.current_attempt
        if last is not None:
            # No node has reported the new step yet (a group's step succeeds once every node has).
            last = step_started(last)
            moved = moved.with_current_attempt(last)
        if staged is None or last is None:
            return moved
        restored = {
            "checkpoint_restored": staged.checkpoint_restored,
            "restored_step": staged.restored_step,
            "setup_seconds": staged.setup_seconds,
        }
        # What the work resumes from is known now: the earlier attempts' steps lost count from it.
        return settle_steps_lost(
            moved.with_current_attempt(last.model_copy(update=restored)), staged.restored_step
        )

    update_job(store, job_id, record)
    manifest = job.require_manifest()
    # interval_steps: auto: the agent computes the interval from the save it measures and this estimate.
    rate = pool_rate(job, now) if step == "train" and manifest.training.checkpoint.auto else None
    command = AgentCommand(
        step=step,
        job_id=job_id,
        attempt=attempt.number,
        report_url=settings.agent_report_url,
        region=settings.region,
        jobs_bucket=settings.jobs_bucket,
        manifest=manifest,
        heartbeat_seconds=timing.agent_heartbeat_seconds,
        poll_seconds=timing.agent_poll_seconds,
        max_runtime_seconds=limits.max_runtime_seconds if limits else None,
        stop_at=stop_at,
        stop_grace_seconds=timing.limit_grace_seconds,
        pool_rate=rate,
        hang_seconds=manifest.hang_seconds if step == "train" else None,
        gpu_idle=gpu_idle_watch(manifest, timing) if step == "train" else None,
        telemetry_seconds=timing.telemetry_seconds,
    )
    sent = [
        send_agent_command(
            command.model_copy(update={"group": node_group(job_id, attempt, node)}),
            node.instance_id,
            objects=objects,
            commands=commands,
            document_name=settings.agent_document_name,
        )
        for node in attempt.node_runs()
    ]
    return sent[0]


def gpu_idle_watch(manifest: JobManifest, timing: WorkflowTiming) -> GpuIdleWatch | None:
    """The agent's idle watch for the manifest's ``training.gpu_idle``, its minutes time-scaled; None without one.

    Scaled like the workflow's other waits, so that the emulator's tests see an idle node released in seconds
    while AWS waits the minutes the user wrote (``time_scale`` 1).
    """
    policy = manifest.training.gpu_idle
    if policy is None:
        return None
    return GpuIdleWatch(
        utilization_below=policy.utilization_below, seconds=policy.minutes * 60.0 * timing.time_scale
    )


def node_group(job_id: str, attempt: Attempt, node: NodeRun) -> NodeGroup | None:
    """Where ``node`` stands in the attempt's group and how torchrun reaches node 0; None for one node.

    Raises
    ------
    InstanceLost
        When node 0's address is not known (the readiness check records it once every node runs).
    """
    if not attempt.group:
        return None
    host = attempt.nodes[0].private_ip
    if host is None:
        raise InstanceLost(f"job {job_id}: node 0 of attempt {attempt.number} has no known address")
    return NodeGroup(
        nodes=len(attempt.nodes),
        node=node.node,
        rendezvous_host=host,
        rendezvous_port=rendezvous_port(job_id, attempt.number),
        rendezvous_id=rendezvous_id(job_id, attempt.number),
        efa=attempt.efa,
    )


def step_detail(instance_id: str, staged: StageResult | None) -> str:
    """The timeline's note for a step: the instance, and for training how long setup took there, if it ran.

    ``i-0abc``; ``i-0abc: setup took 41.3 s`` when the stage step ran the manifest's ``training.setup``.
    """
    if staged is None or staged.setup_seconds is None:
        return instance_id
    return f"{instance_id}: setup took {staged.setup_seconds:.1f} s"


def send_agent_command(
    command: AgentCommand, instance_id: str, *, objects: Objects, commands: Commands, document_name: str
) -> str:
    """Write ``command`` to the jobs bucket and send its key to the agent on ``instance_id`` through SSM.

    Returns
    -------
    str
        The SSM command id.
    """
    node = command.group.node if command.group else 0
    key = agent_command_key(command.job_id, command.attempt, command.step, node)
    objects.put_json(command.jobs_bucket, key, command.model_dump(mode="json"))
    return commands.run_agent(document_name, instance_id, f"s3://{command.jobs_bucket}/{key}")

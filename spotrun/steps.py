"""Sending a step to the instance agent, which answers the workflow on the task token."""

from __future__ import annotations

from datetime import datetime

from spotrun.agent.command import AgentCommand, StageResult, WorkflowStep
from spotrun.errors import InstanceLost
from spotrun.fleet import manifest_of
from spotrun.job import Job, JobStatus, transition
from spotrun.layout import agent_command_key
from spotrun.ports import Commands, Objects
from spotrun.store import JobStore, update_job
from spotrun.timing import WorkflowTiming

_STEP_STATUS: dict[WorkflowStep, JobStatus] = {"stage": JobStatus.STAGING, "train": JobStatus.TRAINING}


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
    region: str,
    jobs_bucket: str,
    document_name: str,
    now: datetime,
) -> str:
    """Record the step, write the agent's command to S3 and send its key to the instance through SSM.

    The task token travels inside the S3 document (private, encrypted), never as an SSM parameter, which SSM
    keeps in its command history.

    Parameters
    ----------
    job_id, step
        The job and the step the agent must run.
    task_token
        The workflow's token for this step: the agent reports success, failure and heartbeats with it.
    timing
        How often the agent heartbeats and polls.
    staged
        For ``train``: what staging reported (the checkpoint it restored is recorded on the attempt).
    store, objects, commands
        Ports to the job store, S3 and SSM.
    region, jobs_bucket, document_name
        Deployment settings.
    now
        The current time.

    Returns
    -------
    str
        The SSM command id.
    """
    job = store.get(job_id)
    attempt = None if job is None else job.current_attempt
    if job is None or attempt is None or attempt.ended_at is not None:
        raise InstanceLost(f"job {job_id} has no instance to run {step} on")

    def record(current: Job) -> Job:
        moved = transition(current, _STEP_STATUS[step], now, detail=attempt.instance_id)
        moved = moved.model_copy(update={"task_token": task_token})
        if staged is None or not moved.attempts:
            return moved
        last = moved.attempts[-1].model_copy(
            update={"checkpoint_restored": staged.checkpoint_restored, "restored_step": staged.restored_step}
        )
        return moved.model_copy(update={"attempts": [*moved.attempts[:-1], last]})

    update_job(store, job_id, record)
    command = AgentCommand(
        step=step,
        job_id=job_id,
        attempt=attempt.number,
        task_token=task_token,
        region=region,
        jobs_bucket=jobs_bucket,
        manifest=manifest_of(job),
        heartbeat_seconds=timing.agent_heartbeat_seconds,
        poll_seconds=timing.agent_poll_seconds,
    )
    return send_agent_command(
        command, attempt.instance_id, objects=objects, commands=commands, document_name=document_name
    )


def send_agent_command(
    command: AgentCommand, instance_id: str, *, objects: Objects, commands: Commands, document_name: str
) -> str:
    """Write ``command`` to the jobs bucket and send its key to the agent on ``instance_id`` through SSM.

    Returns
    -------
    str
        The SSM command id.
    """
    key = agent_command_key(command.job_id, command.attempt, command.step)
    objects.put_json(command.jobs_bucket, key, command.model_dump(mode="json"))
    return commands.run_agent(document_name, instance_id, f"s3://{command.jobs_bucket}/{key}")

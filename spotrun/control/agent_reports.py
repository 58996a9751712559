"""Answering the workflow for an agent: the instance reports, the control plane holds the token.

An instance never sees a task token. Its agent sends each heartbeat, success and failure to the API's agent
route, signed with the instance's role credentials; API Gateway authenticates the signature and names the
caller (``requestContext.identity.userArn``). For EC2 role credentials that name is the role session
``arn:aws:sts::<account>:assumed-role/<role>/<instance-id>``: EC2 names the session after the instance
(IAM's ``aws:userid`` policy variable is ``role-id:ec2-instance-id`` for a role assigned to an EC2 instance,
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html). The decision below
answers Step Functions with the token from the job record only when that instance is the one the job's open
attempt runs on, so training code on one instance cannot answer another job's workflow.
"""

from __future__ import annotations

import logging
import re
from typing import Annotated, Final, Literal

from pydantic import BaseModel, Field

from spotrun.control.ports import JobStore, Workflows
from spotrun.control.store import update_job
from spotrun.model.agent_protocol.command import (
    MAX_CAUSE_CHARS,
    MAX_ERROR_CHARS,
    NodeDone,
    StageResult,
    TrainResult,
    WorkflowStep,
)
from spotrun.model.base import DeferredModel, DeferredRootModel
from spotrun.model.errors import ConcurrentUpdate
from spotrun.model.job.attempt import Attempt, CheckpointIntervalUsed, NodeRun
from spotrun.model.job.gpu_health import GPU_SAMPLE_REFRESH_SECONDS, memory_high, sample_due
from spotrun.model.job.group import all_done
from spotrun.model.job.record import STEP_STATUS, Job
from spotrun.model.job.telemetry import GpuLine
from spotrun.model.layout import JOB_ID_PATTERN
from spotrun.model.manifest.rules import JsonInt

logger = logging.getLogger(__name__)

ReportKind = Literal["heartbeat", "success", "failure"]

# The status a job is in while the workflow waits on the agent for a step (control.dispatch records it).
_RESULTS: dict[str, type[BaseModel]] = {"stage": StageResult, "train": TrainResult}


class ReportInvalid(Exception):
    """The report's result is not the one its step produces (HTTP 422)."""


# An assumed-role session ARN, as STS and API Gateway name it: account, role name (no path), session name.
_SESSION_ARN: Final = (
    r"^arn:aws[a-z-]*:sts::(?P<account>\d{12}):assumed-role/"
    r"(?P<role>[\w+=,.@-]{1,64})/(?P<session>[\w+=,.@-]{2,64})$"
)


class ReportRefused(Exception):
    """The caller may not report for this job: not its instance's role session (HTTP 403)."""


class ReportNotWaited(Exception):
    """The job does not wait on this step of this attempt (HTTP 409)."""


class TaskGone(Exception):
    """Step Functions no longer waits for the task: timed out, stopped, or already answered (HTTP 410)."""


class _Report(DeferredModel):
    job_id: str = Field(pattern=rf"^{JOB_ID_PATTERN}$", description="The job the step belongs to.")
    attempt: JsonInt = Field(ge=1, le=10_000, description="The attempt the agent runs.")
    step: WorkflowStep


class HeartbeatReport(_Report):
    """The step is alive."""

    kind: Literal["heartbeat"]
    checkpoint_interval: CheckpointIntervalUsed | None = Field(
        None,
        description="Under checkpoint.interval_steps auto: the interval the agent told the script, and why; "
        "kept on the attempt in the job record when it changed.",
    )
    gpu: GpuLine | None = Field(
        None,
        description="The node's latest nvidia-smi sample of its GPUs; kept on the attempt's node in the job "
        "record (when due, by keep_gpu_sample), with the first reading of GPU memory above 90 %.",
    )


class SuccessReport(_Report):
    """The step succeeded with its result (a StageResult for stage, a TrainResult for train; a NodeDone from a
    node other than node 0 of a group, whose step succeeds once every node's has)."""

    kind: Literal["success"]
    output: StageResult | TrainResult | NodeDone


class FailureReport(_Report):
    """The step failed: an error name the workflow routes on, and a JSON cause."""

    kind: Literal["failure"]
    error: str = Field(min_length=1, max_length=MAX_ERROR_CHARS)
    cause: str = Field(max_length=MAX_CAUSE_CHARS)


class AgentReport(
    DeferredRootModel[Annotated[HeartbeatReport | SuccessReport | FailureReport, Field(discriminator="kind")]]
):
    """What an agent reports about the step it runs; the body of ``POST /agent/reports``."""


class CallerIdentity(DeferredModel):
    """Who signed the request, as API Gateway authenticated it (never from the body).

    Attributes
    ----------
    user_arn
        ``requestContext.identity.userArn``; None for a request without an authenticated identity.
    account_id
        The API owner's account (``requestContext.accountId``): the instance role is in it.
    """

    user_arn: str | None
    account_id: str


class ReportAnswer(DeferredModel):
    """A report the workflow took."""

    job_id: str
    step: WorkflowStep
    kind: ReportKind


def caller_instance(identity: CallerIdentity, instance_role_name: str) -> str:
    """The instance a request was signed from, when it was signed with the deployment's instance role.

    Raises
    ------
    ReportRefused
        When the caller is not a session of ``instance_role_name`` in the API's account.
    """
    match = re.match(_SESSION_ARN, identity.user_arn or "")
    if match is None:
        raise ReportRefused("only an instance of this deployment, signing with its role, may report")
    if match["account"] != identity.account_id or match["role"] != instance_role_name:
        raise ReportRefused("only an instance of this deployment, signing with its role, may report")
    return match["session"]


def caller_open_attempt(
    identity: CallerIdentity, instance_role_name: str, store: JobStore, job_id: str
) -> tuple[Job, Attempt]:
    """The job and its open attempt, when the caller is the instance that attempt runs on.

    Raises
    ------
    ReportRefused
        When the caller is not a session of the instance role, or not the instance of the job's open attempt
        (or the job does not exist: the caller learns nothing of other jobs).
    """
    instance_id = caller_instance(identity, instance_role_name)
    job = store.get(job_id)
    attempt = None if job is None else job.current_attempt
    if job is None or attempt is None or attempt.node_on(instance_id) is None:
        raise ReportRefused(f"instance {instance_id} does not run an open attempt of job {job_id}")
    if attempt.ended_at is not None:
        # A node kept from a closed attempt still runs its old step: it is the job's, and must stop it.
        raise ReportNotWaited(f"attempt {attempt.number} of job {job_id} has ended")
    return job, attempt


def answer_agent_report(
    report: HeartbeatReport | SuccessReport | FailureReport,
    *,
    identity: CallerIdentity,
    instance_role_name: str,
    store: JobStore,
    workflows: Workflows,
    gpu_refresh_seconds: float = GPU_SAMPLE_REFRESH_SECONDS,
) -> ReportAnswer:
    """Answer the workflow for the instance that runs ``report.job_id``'s open attempt, and for no other.

    A heartbeat's GPU sample is kept on its node of the attempt when the record is due for it
    (:func:`keep_gpu_sample`): no write unless the stored sample is
    ``gpu_refresh_seconds`` old or the node's memory first reads above 90 %.

    Parameters
    ----------
    report
        The agent's report (:attr:`AgentReport.root`).
    identity
        Who signed the request.
    instance_role_name
        The deployment's instance role: only its sessions may report.
    store, workflows
        Ports to the job store (which holds the task token) and Step Functions.
    gpu_refresh_seconds
        How old a node's stored GPU sample may grow (time-scaled in the emulator).

    Returns
    -------
    ReportAnswer
        What was answered.

    Raises
    ------
    ReportRefused
        The caller is not the instance of the job's open attempt (or the job does not exist: the caller
        learns nothing of other jobs).
    ReportNotWaited
        The job does not wait on this step of this attempt.
    ReportInvalid
        A success whose result is not its step's.
    TaskGone
        Step Functions no longer waits for the task.
    """
    job, attempt = caller_open_attempt(identity, instance_role_name, store, report.job_id)
    if attempt.number != report.attempt or job.status != STEP_STATUS[report.step] or not job.task_token:
        raise ReportNotWaited(
            f"job {report.job_id} does not wait on {report.step} of attempt {report.attempt} "
            f"(it is {job.status}, attempt {attempt.number})"
        )
    token = job.task_token
    if isinstance(report, HeartbeatReport):
        taken = workflows.send_heartbeat(token)
        if taken and report.checkpoint_interval not in (None, attempt.checkpoint_interval):
            _record_interval(store, job.job_id, attempt.number, report.checkpoint_interval)
        if taken and report.gpu is not None:
            instance_id = caller_instance(identity, instance_role_name)
            try:
                keep_gpu_sample(
                    store, job, attempt, instance_id, report.gpu, refresh_seconds=gpu_refresh_seconds
                )
            except ConcurrentUpdate:
                # The heartbeat was answered; the next one brings a newer sample.
                logger.warning("job %s: GPU sample not kept (the record kept changing)", job.job_id)
    elif isinstance(report, SuccessReport):
        node = attempt.node_on(caller_instance(identity, instance_role_name))
        if node is None or node.node == 0:
            if not isinstance(report.output, _RESULTS[report.step]):
                raise ReportInvalid(f"the result of {report.step} is a {_RESULTS[report.step].__name__}")
        elif not isinstance(report.output, NodeDone) or report.output.node != node.node:
            raise ReportInvalid(f"node {node.node} reports a NodeDone of node {node.node}")
        output = _group_result(store, job.job_id, attempt, node, report.output) if attempt.group else None
        if attempt.group and output is None:
            return ReportAnswer(job_id=report.job_id, step=report.step, kind=report.kind)
        taken = workflows.send_success(token, output or report.output.model_dump_json())
    else:
        taken = workflows.fail_task(token, report.error, report.cause)
    if not taken:
        raise TaskGone(f"the workflow no longer waits for {report.step} of job {report.job_id}")
    return ReportAnswer(job_id=report.job_id, step=report.step, kind=report.kind)


def _group_result(
    store: JobStore, job_id: str, attempt: Attempt, node: NodeRun | None, output: BaseModel
) -> str | None:
    """Mark the node's part of the step done; node 0's result (JSON) once every node's is, else None.

    The write is guarded by the record's version (:func:`spotrun.control.store.update_job`): of two nodes that
    report at once, exactly one sees the group complete and answers the workflow.
    """
    if node is None:
        return None
    finished: list[str] = []

    def mark(current: Job) -> Job:
        finished.clear()
        latest = current.open_attempt
        mine = None if latest is None or latest.number != attempt.number else latest.node_on(node.instance_id)
        if latest is None or mine is None or mine.done:
            return current
        marked = latest.with_node(mine.model_copy(update={"done": True}))
        if mine.node == 0:
            marked = marked.model_copy(update={"leader_result": output.model_dump_json()})
        if all_done(marked) and marked.leader_result is not None:
            finished.append(marked.leader_result)
        return current.with_current_attempt(marked)

    update_job(store, job_id, mark)
    return finished[0] if finished else None


def _record_interval(store: JobStore, job_id: str, number: int, used: CheckpointIntervalUsed | None) -> None:
    """Keep the interval on the attempt it is about (only while that attempt is still the open one)."""

    def keep(current: Job) -> Job:
        attempt = current.open_attempt
        if attempt is None or attempt.number != number:
            return current
        return current.with_current_attempt(attempt.model_copy(update={"checkpoint_interval": used}))

    update_job(store, job_id, keep)


def keep_gpu_sample(
    store: JobStore,
    job: Job,
    attempt: Attempt,
    instance_id: str,
    line: GpuLine,
    *,
    refresh_seconds: float,
) -> bool:
    """Keep a heartbeat's GPU sample on its node of the attempt, when the record is due for it.

    ``job`` and ``attempt`` are the record the heartbeat was answered from: when no write is due (the stored
    sample is younger than ``refresh_seconds`` and the memory flag does not flip), nothing is read or written
    again. A due write re-reads the record and is guarded by its version
    (:func:`spotrun.control.store.update_job`).

    Parameters
    ----------
    store
        The job store.
    job, attempt
        The job and its open attempt, as read for the heartbeat.
    instance_id
        The instance that sent it.
    line
        Its sample.
    refresh_seconds
        How old the stored sample may grow before a newer one replaces it
        (:data:`spotrun.model.job.gpu_health.GPU_SAMPLE_REFRESH_SECONDS`, time-scaled).

    Returns
    -------
    bool
        Whether the record was written.
    """
    if _kept(attempt, instance_id, line, refresh_seconds) is None:
        return False
    written = False

    def keep(current: Job) -> Job:
        nonlocal written
        latest = current.open_attempt
        if latest is None or latest.number != attempt.number:
            return current
        updated = _kept(latest, instance_id, line, refresh_seconds)
        written = updated is not None
        return current if updated is None else current.with_current_attempt(updated)

    update_job(store, job.job_id, keep)
    return written


def _kept(attempt: Attempt, instance_id: str, line: GpuLine, refresh_seconds: float) -> Attempt | None:
    """The attempt with ``line`` kept on its node; None when nothing is due (or the node is not the attempt's)."""
    node = attempt.node_on(instance_id)
    if node is None:
        return None
    flag = memory_high(line, node.node) if node.gpu_memory_high is None else None
    stored = node.gpu
    if flag is None and not sample_due(stored, line, refresh_seconds):
        return None
    newest = line if stored is None or line.at > stored.at else stored
    update: dict[str, object] = {"gpu": newest}
    if flag is not None:
        update["gpu_memory_high"] = flag
    return attempt.with_node(node.model_copy(update=update))

"""The record of an interruption: the attempt closed, the work it lost measured, its lost instances released.

EC2's events that lead here are acted on in :mod:`spotrun.control.capacity.ec2_events`; the workflow's Catch of a
lost step calls :func:`record_interruption` once per attempt.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any, Literal

from spotrun.control.capacity.readiness import not_visible_yet
from spotrun.control.ports import Compute, JobStore, Objects
from spotrun.control.store import update_job
from spotrun.model.agent_protocol.checkpoints import group_checkpoint_keys
from spotrun.model.agent_protocol.command import (
    TRAINING_FAILED,
    TRAINING_HUNG,
    TRAINING_IDLE,
    read_caught_error,
)
from spotrun.model.base import DeferredModel
from spotrun.model.errors import InterruptionsExceeded
from spotrun.model.job.attempt import END_HUNG, END_IDLE, Attempt, InterruptionReason
from spotrun.model.job.attempt_end import end_reason, steps_lost_fields
from spotrun.model.job.gpu_health import idle_message, read_idle_cause
from spotrun.model.job.group import close_group
from spotrun.model.job.record import Job, JobStatus, transition
from spotrun.model.layout import checkpoints_prefix, progress_key

logger = logging.getLogger(__name__)

_REASON_BY_ERROR: dict[str, InterruptionReason] = {
    "Spot.Interrupted": "interrupted",
    "Instance.Lost": "instance-lost",
    "Instance.BootTimeout": "boot-timeout",
    "States.HeartbeatTimeout": "heartbeat-timeout",
    "States.Timeout": "heartbeat-timeout",
}


class InterruptionRecord(DeferredModel):
    """What the workflow learns from recording an interruption (or a deadline's move, which is none)."""

    reason: InterruptionReason | Literal["deadline-move", "hung", "idle", "failed"]
    # The step failed on its own (Training.Failed with every node of the group alive, or Training.Idle under
    # training.gpu_idle action fail): nothing was recorded, and the workflow fails the job with the step's own
    # error (statemachines/job.asl.json, Interrupted?).
    failed: bool = False
    interruptions: int
    last_step: int | None
    # At the close: the latest committed checkpoint and the steps past it, provisional until the next attempt
    # stages (the job record then holds the settled figure, spotrun.model.job.attempt_end).
    resume_from_step: int | None
    steps_lost: int | None


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
        instance, a heartbeat timeout, ``Training.Hung``, ``Training.Idle`` (an attempt ended ``idle`` under
        ``training.gpu_idle`` action ``relaunch``, its idle node terminated; the job's failure under action
        ``fail``), or ``Training.Failed``: a group's command fails when a peer dies under it, which is that peer's
        loss if EC2 no longer runs it, and the job's failure otherwise).
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
        The reason, the step reached, the step training resumes from and the steps lost; ``failed`` (and nothing
        recorded) for a ``Training.Failed`` that is no node's loss and for a ``Training.Idle`` the manifest
        fails the job on.

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
    idle = error_name == TRAINING_IDLE
    policy = job.require_manifest().training.gpu_idle
    fails = idle and (policy is None or policy.action == "fail")
    if fails or (
        error_name == TRAINING_FAILED
        and not (attempt.group and lost_nodes(attempt, caught_reason, compute, now))
    ):
        return InterruptionRecord(
            reason="failed",
            failed=True,
            interruptions=job.interruptions,
            last_step=None,
            resume_from_step=None,
            steps_lost=None,
        )

    def why(latest: Attempt) -> str:
        if idle:
            return END_IDLE
        return END_HUNG if hung else end_reason(caught_reason, latest)

    reason = why(attempt)
    last_step = None if caught.failure is None else caught.failure.last_step
    if last_step is None:
        last_step = _reported_step(objects, jobs_bucket, job_id, attempt.number)
    # Provisional: the old instance may still commit the checkpoint it took on the warning; the next attempt's
    # staging settles the figure against the checkpoint it restored (spotrun.model.job.attempt_end).
    resume_from = _latest_committed_step(objects, jobs_bucket, job_id)
    lost = steps_lost_fields(attempt, last_step, resume_from, final=False)
    # A group keeps its healthy nodes for the next attempt; one node, or a lost one, is let go. An idle node is
    # let go like a lost one (an idle instance must not stay billed), its peers kept.
    if attempt.group and keep_healthy_nodes:
        gone = lost_nodes(attempt, caught_reason, compute, now)
        if idle:
            gone |= idle_nodes(attempt, error)
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
        if idle:
            nodes = current.require_manifest().resources.nodes
            where += f": {idle_message(policy, read_idle_cause(caught.cause), nodes)}"
        moved = transition(current.with_current_attempt(closed), JobStatus.INTERRUPTED, now, detail=where)
        return moved.model_copy(update={"task_token": None})

    recorded = update_job(store, job_id, close)
    limit = recorded.require_manifest().capacity.max_interruptions
    if recorded.interruptions > limit:
        raise InterruptionsExceeded(
            f"job {job_id} was interrupted {recorded.interruptions} times (hangs and idle relaunches "
            f"included; the last: {reason}); capacity.max_interruptions allows {limit}"
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


def idle_nodes(attempt: Attempt, error: dict[str, Any]) -> set[str]:
    """The instance of the node a ``Training.Idle`` names (its cause's ``node``); every node's when it names none
    of the attempt's."""
    node = read_idle_cause(str(error.get("Cause") or "")).node
    named = [run.instance_id for run in attempt.node_runs() if node is not None and run.node == node]
    return set(named) if named else set(attempt.instance_ids())


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

"""Recording how a job ended: status, error, cost."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from spotrun.control.ports import JobStore
from spotrun.control.store import update_job
from spotrun.model.capacity.pricing import job_cost
from spotrun.model.job.gpu_health import idle_message, read_idle_cause
from spotrun.model.job.limits import limit_details, limits_report
from spotrun.model.job.record import Job, JobError, JobStatus, transition


def error_from_workflow(error: dict[str, Any] | None) -> JobError:
    """Turn the ``{"Error", "Cause"}`` a Catch put in the workflow state into a :class:`JobError`.

    The cause is the agent's :class:`FailureCause` JSON, a Lambda error payload, or plain text.
    """
    if not error:
        return JobError(type="Unknown", message="the workflow failed without an error")
    # Imported here: only a failed job reads a caught error, and the agent's command models it parses would
    # otherwise load at every cold start of the finalize function (docs/development/cold-start.md).
    from spotrun.model.agent_protocol.command import read_caught_error

    caught = read_caught_error(error)
    error_type = "Unknown" if caught.error is None else caught.error
    if caught.lambda_message is not None:
        return JobError(type=error_type, message=caught.lambda_message)
    failure = caught.failure
    if failure is not None:
        return JobError(
            type=error_type, message=failure.message, exit_code=failure.exit_code, log_tail=failure.log_tail
        )
    return JobError(type=error_type, message=caught.cause or error_type)


def idle_failure_message(job: Job, error: dict[str, Any] | None) -> str:
    """The record's message for a job that training.gpu_idle failed: which GPUs idled, below what, how long."""
    manifest = job.require_manifest()
    cause = read_idle_cause(str((error or {}).get("Cause") or ""))
    return idle_message(manifest.training.gpu_idle, cause, manifest.resources.nodes)


def finalize_job(
    *,
    job_id: str,
    outcome: Literal["SUCCEEDED", "FAILED"],
    error: dict[str, Any] | None,
    store: JobStore,
    now: datetime,
) -> Job:
    """Put the job in its final status, with its cost and, on failure, the error.

    A job that is already final (for instance cancelled meanwhile) keeps its status; only its cost is updated.
    What it used of its budget and runtime allowance is recorded in ``limits``; a job that ended at one of
    them says so in its error's details.
    """

    def finish(current: Job) -> Job:
        cost = job_cost(current.billed_instances(), now=now)
        limits = limits_report(current, now) if current.manifest is not None else None
        if current.status.is_terminal:
            return current.model_copy(update={"cost": cost, "limits": limits})
        if outcome == "SUCCEEDED":
            succeeded = transition(current, JobStatus.SUCCEEDED, now)
            return succeeded.model_copy(update={"cost": cost, "limits": limits})
        job_error = error_from_workflow(error)
        # Imported on the failure path only, as error_from_workflow does.
        from spotrun.model.agent_protocol.command import TRAINING_IDLE

        if job_error.type == TRAINING_IDLE and current.manifest is not None:
            job_error = job_error.model_copy(update={"message": idle_failure_message(current, error)})
        failed = transition(current, JobStatus.FAILED, now, detail=f"{job_error.type}: {job_error.message}")
        failed = failed.model_copy(update={"cost": cost, "error": job_error, "limits": limits})
        if limits is not None:
            details = limit_details(failed, limits)
            failed = failed.model_copy(
                update={"error": job_error.model_copy(update={"details": [*job_error.details, *details]})}
            )
        return failed

    return update_job(store, job_id, finish)

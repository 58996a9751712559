"""What the REST API does with jobs: list, show and cancel them (pure logic over the ports; no boto3 here).

Submission lives in :mod:`spotrun.control.submission`; logs and restores of archived models in
:mod:`spotrun.control.views.artifacts`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from spotrun.control.ports import Compute, JobStore, Workflows
from spotrun.control.progress import JobProgress, summary_figures
from spotrun.control.store import update_job
from spotrun.control.views.job_json import job_record
from spotrun.model.base import DeferredModel
from spotrun.model.capacity.pricing import CostReport, job_cost
from spotrun.model.capacity.wait import CapacityWaitView
from spotrun.model.errors import JobFinished, JobNotFound
from spotrun.model.job.attempt import END_CANCELLED, Attempt
from spotrun.model.job.record import (
    ArchivedObject,
    ArchiveTotal,
    Job,
    JobError,
    JobStatus,
    LimitsReport,
    StatusChange,
    transition,
    utc_now,
)


class JobSummary(DeferredModel):
    """One line of a listing."""

    job_id: str
    name: str
    status: JobStatus
    created_at: datetime
    updated_at: datetime
    error_type: str | None = Field(
        default=None,
        description="How a failed job ended, e.g. Budget.Exceeded or Training.MaxRuntimeExceeded.",
    )
    instance_type: str | None = Field(default=None, description="Of its last attempt; None before the first.")
    lifecycle: str | None = Field(default=None, description="spot or on-demand, of its last attempt.")
    recoveries: int = Field(0, description="Attempts after the first: each carried it onto a new instance.")
    cost_usd: float = Field(0.0, description="What its instances cost so far, USD.")
    duration_seconds: float = Field(0.0, description="From submission to its end, or to now while it runs.")
    waiting_for_capacity_since: datetime | None = Field(
        default=None, description="While it waits for capacity: since when (GET /jobs/{id} says why)."
    )


class JobPage(DeferredModel):
    """A page of jobs, newest first."""

    jobs: list[JobSummary]
    next_token: str | None = Field(
        default=None, description="Pass as next_token for the next page; absent at the end."
    )


class JobView(DeferredModel):
    """Everything the API shows about one job: status, attempts, timeline, cost and archived artifacts."""

    job_id: str
    name: str
    status: JobStatus
    created_at: datetime
    updated_at: datetime
    execution_arn: str | None = None
    manifest: dict[str, Any] | None = None
    timeline: list[StatusChange] = Field(default_factory=list)
    attempts: list[Attempt] = Field(default_factory=list)
    archive: list[ArchivedObject] = Field(
        default_factory=list, description="The archived objects; at most the first 100 (see archive_total)."
    )
    archive_total: ArchiveTotal | None = None
    cost: CostReport | None = None
    limits: LimitsReport | None = None
    model_sha256: str | None = None
    error: JobError | None = None
    standby: Attempt | None = None
    unused_instances: list[Attempt] = Field(
        default_factory=list, description="Standbys that ran without hosting an attempt: in the cost."
    )
    progress: JobProgress | None = Field(
        default=None, description="While it runs: its step, last committed checkpoint and cost so far."
    )
    capacity_wait: CapacityWaitView | None = Field(
        default=None,
        description="While it waits for capacity (or when it ended waiting): since when, each pool's last error.",
    )
    capacity_waited_seconds: float = Field(
        0.0,
        description="Its ended waits for capacity, in seconds (capacity.max_wait_minutes counts them too).",
    )


class CancelResult(DeferredModel):
    """What a cancel did."""

    job: JobView
    execution_stopped: bool = Field(description="False when the workflow had already ended.")
    instances_terminated: list[str]


def job_view(job: Job) -> JobView:
    """The API's view of a job (never the task token)."""
    return JobView.model_validate(job_record(job))


def get_job(store: JobStore, job_id: str) -> Job:
    """The job, or JobNotFound."""
    job = store.get(job_id)
    if job is None:
        raise JobNotFound(f"no job with id {job_id!r}")
    return job


def list_jobs(
    store: JobStore,
    *,
    status: JobStatus | None,
    name: str | None,
    limit: int,
    next_token: str | None,
    now: datetime | None = None,
) -> JobPage:
    """One page of jobs, newest first, filtered by status and name (``now``: the end of running ones' figures)."""
    jobs, token = store.list_jobs(status=status, name=name, limit=limit, next_token=next_token)
    at = now or utc_now()
    return JobPage(
        jobs=[
            JobSummary.model_validate(
                {
                    **job.model_dump(include=set(JobSummary.model_fields)),
                    "error_type": job.error.type if job.error is not None else None,
                    "waiting_for_capacity_since": (
                        job.capacity_wait.since
                        if job.capacity_wait is not None and not job.status.is_terminal
                        else None
                    ),
                    **summary_figures(job, at),
                }
            )
            for job in jobs
        ],
        next_token=token,
    )


def cancel_job(
    job_id: str, *, store: JobStore, workflows: Workflows, compute: Compute, now: datetime
) -> CancelResult:
    """Cancel a job: stop its workflow, terminate its instances, keep its committed checkpoints.

    Step Functions runs no Catch on StopExecution, so the release the workflow would do is done here. The
    checkpoints in S3 are not touched.

    Raises
    ------
    JobNotFound
        When no job has that id.
    JobFinished
        When the job has ended already (nothing is changed).
    """
    # Imported here: only a cancel releases instances. The users' API imports this module at every cold start for
    # the job views; the release (with the readiness checks and the standby's retirement) loads at the first cancel.
    from spotrun.control.capacity.release import release_instances

    job = get_job(store, job_id)
    if job.status.is_terminal:
        raise JobFinished(
            f"job {job_id} is {job.status.value}: only a job that has not ended can be cancelled"
        )
    stopped = False
    if job.execution_arn is not None:
        stopped = workflows.stop(job.execution_arn, f"cancelled through the API at {now.isoformat()}")
    terminated = release_instances(job_id=job_id, reason=END_CANCELLED, store=store, compute=compute, now=now)

    def cancel(current: Job) -> Job:
        if current.status.is_terminal:  # the workflow finished it meanwhile: its outcome stands
            return current
        cancelled = transition(current, JobStatus.CANCELLED, now, detail="cancelled through the API")
        return cancelled.model_copy(update={"cost": job_cost(current.billed_instances(), now=now)})

    final = update_job(store, job_id, cancel)
    return CancelResult(job=job_view(final), execution_stopped=stopped, instances_terminated=terminated)

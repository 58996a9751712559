"""The job record and the one place where status changes are allowed or refused; its attempts: attempt.py."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, model_validator

from spotrun.model.base import RecordModel
from spotrun.model.capacity.pricing import CostReport
from spotrun.model.capacity.wait import CapacityWait
from spotrun.model.errors import InvalidTransition
from spotrun.model.job.attempt import RESTART_REASONS, Attempt
from spotrun.model.job.deadline_record import LifecycleDecision, StepsReported
from spotrun.model.manifest.schema import JobManifest


def utc_now() -> datetime:
    """The current time, timezone-aware (every timestamp in spotrun is UTC)."""
    return datetime.now(UTC)


class JobStatus(StrEnum):
    """Where a job is in its life."""

    SUBMITTED = "SUBMITTED"
    REJECTED = "REJECTED"
    ACQUIRING = "ACQUIRING"  # asking EC2 for capacity
    BOOTING = "BOOTING"  # instance launched, waiting until it runs and its agent answers
    STAGING = "STAGING"  # copying inputs (and the latest checkpoint) onto NVMe
    TRAINING = "TRAINING"
    INTERRUPTED = "INTERRUPTED"  # capacity reclaimed; a new attempt follows
    ARCHIVING = "ARCHIVING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def is_terminal(self) -> bool:
        """True when nothing more will happen to the job."""
        return self in TERMINAL_STATUSES


# The status a job holds while the agent runs each workflow step
# (``spotrun.model.agent_protocol.command.WorkflowStep``).
STEP_STATUS: dict[str, JobStatus] = {"stage": JobStatus.STAGING, "train": JobStatus.TRAINING}

TERMINAL_STATUSES = frozenset(
    {JobStatus.REJECTED, JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}
)

# Every status may fail or be cancelled while the job is alive; the rest is the happy path and the relaunch loop.
ALLOWED_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.SUBMITTED: frozenset({JobStatus.ACQUIRING, JobStatus.FAILED, JobStatus.CANCELLED}),
    JobStatus.ACQUIRING: frozenset({JobStatus.BOOTING, JobStatus.FAILED, JobStatus.CANCELLED}),
    JobStatus.BOOTING: frozenset(
        {JobStatus.STAGING, JobStatus.INTERRUPTED, JobStatus.FAILED, JobStatus.CANCELLED}
    ),
    JobStatus.STAGING: frozenset(
        {JobStatus.TRAINING, JobStatus.INTERRUPTED, JobStatus.FAILED, JobStatus.CANCELLED}
    ),
    JobStatus.TRAINING: frozenset(
        {JobStatus.ARCHIVING, JobStatus.INTERRUPTED, JobStatus.FAILED, JobStatus.CANCELLED}
    ),
    JobStatus.INTERRUPTED: frozenset({JobStatus.ACQUIRING, JobStatus.FAILED, JobStatus.CANCELLED}),
    JobStatus.ARCHIVING: frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}),
    JobStatus.REJECTED: frozenset(),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELLED: frozenset(),
}


class ManifestSource(RecordModel):
    """Where the manifest came from: identifies a submission, so a duplicate delivery starts nothing."""

    kind: Literal["s3", "api", "schedule"] = "s3"
    bucket: str | None = None
    key: str | None = None
    etag: str | None = None
    # The manifest's sha256 (API submissions): a reused Idempotency-Key with another manifest is refused.
    manifest_sha256: str | None = None

    def fingerprint(self) -> str:
        """A stable hash of the submission's identity."""
        text = f"{self.kind}|{self.bucket}|{self.key}|{self.etag}"
        return hashlib.sha256(text.encode()).hexdigest()


class StatusChange(RecordModel):
    """One entry of the job's timeline."""

    status: JobStatus
    at: datetime
    detail: str | None = None


class ArchivedObject(RecordModel):
    """One object of the archived model."""

    uri: str
    storage_class: str
    size: int
    sha256: str


# A job record must stay under DynamoDB's 400 KB item limit, so it lists at most this many archived objects;
# the archive's metadata document (STANDARD, beside the model) lists them all.
ARCHIVE_OBJECTS_IN_RECORD = 100


class ArchiveTotal(RecordModel):
    """The whole archived model, when the record lists only its first objects."""

    objects: int
    bytes: int
    metadata_uri: str  # the metadata document listing every archived object


class JobError(RecordModel):
    """Why a job failed or was rejected."""

    type: str
    message: str
    exit_code: int | None = None
    log_tail: str | None = None
    details: list[str] = Field(default_factory=list)


class LimitsReport(RecordModel):
    """What a job used of its limits, counted over all its attempts (recorded when it ends)."""

    max_usd: float | None = Field(description="The manifest's budget.max_usd; None: no budget.")
    spent_usd: float = Field(description="What its instances cost, USD (the standby included).")
    max_runtime_seconds: float = Field(description="The manifest's max_runtime_minutes, in seconds.")
    training_seconds: float = Field(description="Real seconds spent training, over all attempts.")


class Job(RecordModel):
    """Everything spotrun knows about one job. Stored as one document; ``version`` guards concurrent writes."""

    job_id: str
    name: str
    status: JobStatus
    source: ManifestSource
    # Validated once at submission and stored as its JSON form; None for a manifest that was refused. A stored
    # record reloads it through the same JobManifest validation as submission (the JSON form validates again).
    manifest: JobManifest | None = None
    created_at: datetime
    updated_at: datetime
    execution_arn: str | None = None
    timeline: list[StatusChange] = Field(default_factory=list)
    attempts: list[Attempt] = Field(default_factory=list)
    # Only with capacity.deadline: every decision of its policy, in order.
    deadline_decisions: list[LifecycleDecision] = Field(default_factory=list)
    # Only with capacity.deadline and training.total_steps: what the policy learns the work from.
    steps_reported: StepsReported | None = None
    archive: list[ArchivedObject] = Field(default_factory=list)
    archive_total: ArchiveTotal | None = None
    cost: CostReport | None = None
    limits: LimitsReport | None = None
    model_sha256: str | None = None
    error: JobError | None = None
    # While no pool can supply an instance: since when, and each pool's last error (cleared once one is acquired;
    # kept when the job ends because of the wait). The ended waits' total counts against max_wait_minutes.
    capacity_wait: CapacityWait | None = None
    capacity_waited_seconds: float = 0.0
    # An instance launched on the interruption warning, adopted by the next attempt (boot overlaps the upload).
    standby: Attempt | None = None
    # Since when the warning's standby is being launched (control.standby): the next acquisition waits for it
    # rather than launch a second replacement.
    standby_launching_at: datetime | None = None
    # Instances that ran for the job without hosting an attempt (a standby terminated unused, or one that lost a
    # race): EC2 bills them, and the job's release must still find them.
    unused_instances: list[Attempt] = Field(default_factory=list)
    # Instances whose termination EC2 has not confirmed yet (NotFound just after launch proves nothing).
    unreleased: list[str] = Field(default_factory=list)
    # The token of the agent step in progress. Never logged, never shown: it can complete the step.
    task_token: str | None = Field(default=None, repr=False)
    version: int = 0

    @model_validator(mode="before")
    @classmethod
    def _wait_of_an_older_record(cls, data: Any) -> Any:
        # A record written before capacity_wait had only waiting_for_capacity_since: its wait goes on from then.
        if (
            isinstance(data, dict)
            and data.get("waiting_for_capacity_since")
            and not data.get("capacity_wait")
        ):
            return {**data, "capacity_wait": {"since": data["waiting_for_capacity_since"]}}
        return data

    @property
    def current_attempt(self) -> Attempt | None:
        """The latest attempt, if any."""
        return self.attempts[-1] if self.attempts else None

    def require_manifest(self) -> JobManifest:
        """The job's manifest, for the steps of a job that runs (only a refused job has none).

        Raises
        ------
        ValueError
            When the job has no manifest: it was rejected and never runs.
        """
        if self.manifest is None:
            raise ValueError(f"job {self.job_id} has no manifest: it was rejected")
        return self.manifest

    @property
    def open_attempt(self) -> Attempt | None:
        """The latest attempt while it has not ended."""
        attempt = self.current_attempt
        return attempt if attempt is not None and attempt.ended_at is None else None

    def with_current_attempt(self, attempt: Attempt) -> Job:
        """A copy of the job whose latest attempt is ``attempt`` (the job must have one to replace)."""
        return self.model_copy(update={"attempts": [*self.attempts[:-1], attempt]})

    def instance_ids(self) -> list[str]:
        """Every instance the job has ever had, the standby and the unused ones included."""
        return list(dict.fromkeys(instance.instance_id for instance in self.billed_instances()))

    def billed_instances(self) -> list[Attempt]:
        """Every instance EC2 bills the job for: each node of its attempts, its standby, and the standbys it never
        used (one record per instance and period, :meth:`Attempt.billed`)."""
        standby = [self.standby] if self.standby is not None else []
        nodes = [record for attempt in self.attempts for record in attempt.billed()]
        return [*nodes, *standby, *self.unused_instances]

    @property
    def interruptions(self) -> int:
        """How many attempts ended because their capacity went away, or hung (a restart either way)."""
        return sum(1 for attempt in self.attempts if attempt.end_reason in RESTART_REASONS)


def new_job(
    job_id: str, name: str, source: ManifestSource, manifest: JobManifest | None, at: datetime
) -> Job:
    """Create a job record in SUBMITTED state.

    Parameters
    ----------
    job_id, name
        Identity of the job.
    source
        Where the manifest came from.
    manifest
        The validated manifest, or None for a manifest that could not be read.
    at
        Creation time.

    Returns
    -------
    Job
        The new record, version 0, with its first timeline entry.
    """
    return Job(
        job_id=job_id,
        name=name,
        status=JobStatus.SUBMITTED,
        source=source,
        manifest=manifest,
        created_at=at,
        updated_at=at,
        timeline=[StatusChange(status=JobStatus.SUBMITTED, at=at)],
    )


def rejected_job(job_id: str, name: str, source: ManifestSource, error: JobError, at: datetime) -> Job:
    """Create the record of a manifest that was refused: it never runs."""
    return Job(
        job_id=job_id,
        name=name,
        status=JobStatus.REJECTED,
        source=source,
        created_at=at,
        updated_at=at,
        timeline=[StatusChange(status=JobStatus.REJECTED, at=at, detail=error.message)],
        error=error,
    )


def can_transition(current: JobStatus, new: JobStatus) -> bool:
    """Whether the life cycle allows going from ``current`` to ``new``."""
    return new in ALLOWED_TRANSITIONS[current]


def transition(job: Job, new: JobStatus, at: datetime, detail: str | None = None) -> Job:
    """Return a copy of ``job`` in status ``new``, with the change on its timeline.

    Parameters
    ----------
    job
        The current record.
    new
        The status to move to. Moving to the current status is a no-op, so a redelivered step is harmless.
    at
        When it happened.
    detail
        A short note for the timeline.

    Returns
    -------
    Job
        The updated record (the input is not modified).

    Raises
    ------
    InvalidTransition
        When the life cycle does not allow the change.
    """
    if job.status == new:
        return job
    if not can_transition(job.status, new):
        raise InvalidTransition(f"job {job.job_id}: {job.status.value} -> {new.value} is not allowed")
    change = StatusChange(status=new, at=at, detail=detail)
    return job.model_copy(update={"status": new, "updated_at": at, "timeline": [*job.timeline, change]})


def timeline_durations(job: Job, now: datetime) -> list[tuple[JobStatus, float]]:
    """Seconds spent in each timeline entry, the last one up to ``now`` unless it is terminal."""
    durations = []
    for index, change in enumerate(job.timeline):
        if index + 1 < len(job.timeline):
            end = job.timeline[index + 1].at
        else:
            end = change.at if change.status.is_terminal else now
        durations.append((change.status, max(0.0, (end - change.at).total_seconds())))
    return durations

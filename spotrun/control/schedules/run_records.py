"""The records of a schedule's firings, and what a finished job changes in them.

Apart from :mod:`spotrun.control.schedules.firing` because ``finalize`` reads them after every job: that function then
imports this small module, not the schedules' use cases with the submission and the manifest reader they carry.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Protocol

from spotrun.model.base import DeferredModel
from spotrun.model.job.record import Job, JobStatus


class RunRecord(DeferredModel):
    """One firing of a schedule: the job it started, or why it was skipped."""

    schedule: str
    scheduled_time: str
    recorded_at: datetime
    outcome: Literal["started", "skipped"]
    job_id: str | None = None
    reason: str | None = None
    # The inputs' fingerprint; None when the firing could not read its manifest (it was skipped, saying why).
    fingerprint: str | None = None


class RunRecords(Protocol):
    """Where firings and the last successful run of each schedule are kept."""

    def add_run(self, run: RunRecord) -> bool:
        """Record a firing; False (nothing written) when that scheduled time is recorded already."""
        ...

    def get_run(self, schedule: str, scheduled_time: str) -> RunRecord | None:
        """The firing of ``schedule`` at ``scheduled_time``, if recorded."""
        ...

    def runs(self, schedule: str) -> list[RunRecord]:
        """Every recorded firing, newest first."""
        ...

    def last_success(self, schedule: str) -> RunRecord | None:
        """The run whose job succeeded last (by scheduled time)."""
        ...

    def set_last_success(self, run: RunRecord) -> None:
        """Make ``run`` the last successful one unless a later one is recorded."""
        ...


def promote_success(job: Job, records: RunRecords) -> None:
    """When a scheduled job succeeded, its run's fingerprint becomes the schedule's last successful one."""
    if job.status is not JobStatus.SUCCEEDED or job.source.kind != "schedule" or job.source.key is None:
        return
    run = records.get_run(job.source.key, job.source.etag or "")
    if run is not None:
        records.set_last_success(run)

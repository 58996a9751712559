"""The deadline policy's parts of the job record: each decision it took, and the latest step reported."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from spotrun.model.base import RecordModel


class LifecycleDecision(RecordModel):
    """One decision of the deadline policy (:mod:`spotrun.model.deadline.state`): what to run, and the slack
    behind it."""

    at: datetime
    choice: Literal["spot", "on-demand", "wait"]
    # None: the work is not known yet (training.total_steps before enough progress), nor the slack.
    slack_hours: float | None
    work_done_hours: float
    reason: str
    # The work the decision planned with, and where it comes from (spotrun.model.deadline.work): None on records
    # older than the fields, and while the work is not known yet.
    work_hours: float | None = None
    work_source: str | None = None


class StepsReported(RecordModel):
    """A deadline job's latest reported step (training.total_steps), and its training time up to that report."""

    steps: int
    training_hours: float
    at: datetime

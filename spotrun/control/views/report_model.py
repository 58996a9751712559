"""A job's report as data: what ``spotrun report`` and the dashboard's job page draw (no rendering here).

:func:`spotrun.control.views.report.build_report` computes it from the job record and its telemetry; the renderers
in ``spotrun.cli.report`` turn it into an HTML page, its charts and a PNG. Every figure is computed here once, so
the page, the chart and the dashboard show the same numbers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from spotrun.model.base import DeferredModel
from spotrun.model.capacity.candidates import Lifecycle
from spotrun.model.capacity.pricing import CostReport, PriceSource
from spotrun.model.job.attempt import StepsLostBasis
from spotrun.model.job.record import JobStatus
from spotrun.model.job.telemetry import GpuPoint, MetricPoint

STANDBY_PHASE = "standby"
"""The phase of an instance that runs before the job's states reach its attempt (launched on the warning)."""


class StateSpan(DeferredModel):
    """One entry of the job's timeline and how long the job stayed in it."""

    status: JobStatus
    start: datetime
    end: datetime = Field(description="The next entry's time; a terminal entry ends where it starts.")
    seconds: float = Field(ge=0)
    attempt: int | None = Field(
        None, description="The attempt the state belongs to; None before the first and between attempts."
    )
    detail: str | None = None


class Phase(DeferredModel):
    """A part of one instance's life: a job state while its attempt was the job's, or :data:`STANDBY_PHASE`."""

    state: str = Field(description="A JobStatus value, or 'standby'.")
    start: datetime
    end: datetime


class InstanceSpan(DeferredModel):
    """One instance (one node of one attempt, or a standby that hosted none) on the timeline, in its pool."""

    attempt: int = Field(description="Its attempt's number; an unused standby: the attempt it stood by for.")
    node: int = Field(0, ge=0)
    group: bool = Field(False, description="A node of a multi-node attempt.")
    instance_id: str
    instance_type: str
    availability_zone: str
    lifecycle: Lifecycle
    pool: str = Field(description="'<instance type> <zone>': the timeline's row.")
    start: datetime
    end: datetime = Field(description="Its end, or the report's end while it runs.")
    running: bool = Field(False, description="Not ended when the report was made.")
    end_reason: str | None = None
    kept_from: int | None = Field(None, description="The attempt a kept node came from.")
    unused: bool = Field(False, description="A standby that ran without hosting an attempt.")
    phases: list[Phase] = Field(default_factory=list, description="In time order, clipped to the instance.")


EventKind = Literal[
    "rebalance", "warning", "deadline-move", "interruption", "restart", "end", "restore", "gpu-memory-high"
]


class ReportEvent(DeferredModel):
    """Something that happened to an instance: a warning, its end, a checkpoint restored, GPU memory high."""

    at: datetime
    kind: EventKind
    attempt: int
    node: int | None = Field(None, description="A multi-node attempt's node; None for one node.")
    pool: str
    text: str


class CheckpointRestore(DeferredModel):
    """A checkpoint an attempt restored before it trained."""

    attempt: int
    step: int
    location: str | None = Field(None, description="Its key prefix in the jobs bucket.")
    restored_by: datetime | None = Field(
        None, description="When the attempt began to train from it (its TRAINING state); None: it never did."
    )
    committed_by: int | None = Field(
        None, description="The attempt that reached that step (trained past its restored step up to it)."
    )


class AttemptRow(DeferredModel):
    """One row of the attempts table (an unused standby too)."""

    number: int
    instance_ids: list[str]
    instance_type: str
    availability_zone: str
    lifecycle: Lifecycle
    nodes: int = Field(1, description="Instances of the attempt (a group's nodes).")
    price_per_hour: float | None = Field(None, description="Per instance, USD; None: unknown.")
    price_source: PriceSource | None = None
    started_at: datetime
    ended_at: datetime | None = None
    end_reason: str | None = None
    restored_step: int | None = None
    last_step: int | None = None
    steps_lost: int | None = None
    steps_lost_basis: StepsLostBasis | None = None
    notice_checkpoint_committed: bool | None = None
    cost_usd: float | None = Field(
        None, description="What its instances cost (up to the report's end while they run); None: unpriced."
    )
    unused: bool = Field(False, description="A standby that hosted no attempt.")


class CostPoint(DeferredModel):
    """The job's accrued cost at one instant: as paid, and as the same instance-seconds would cost on demand."""

    at: datetime
    paid_usd: float
    on_demand_usd: float


class MetricSummary(DeferredModel):
    """One training metric at a glance."""

    name: str
    points: int
    last: float
    last_step: int | None = None
    minimum: float
    maximum: float


class JobReport(DeferredModel):
    """Everything the report shows of one job, at one instant."""

    job_id: str
    name: str
    status: JobStatus
    error_type: str | None = None
    error_message: str | None = None
    created_at: datetime
    ended_at: datetime | None = Field(None, description="When it reached a terminal status; None: it runs.")
    generated_at: datetime = Field(description="The instant the report was made (the end of running spans).")
    until: datetime = Field(
        description="The end of the charts' time axis: the last instance's end or ended_at, else generated_at."
    )
    duration_seconds: float
    recoveries: int = Field(description="Attempts after the first.")
    interruptions: int = Field(description="Attempts ended by a reclaim, a hang or idle GPUs.")
    zones: list[str] = Field(description="The availability zones its attempts ran in, in order of first use.")
    pools: list[str] = Field(
        description="The pools ('<type> <zone>') its instances ran in (unused standbys too), in order of first use."
    )
    states: list[StateSpan]
    instances: list[InstanceSpan]
    events: list[ReportEvent] = Field(description="In time order.")
    restores: list[CheckpointRestore]
    attempts: list[AttemptRow]
    steps_trained_again: int | None = Field(
        None, description="Sum of the attempts' steps_lost; None when no attempt reported one."
    )
    cost: CostReport
    cost_series: list[CostPoint] = Field(description="Accrued cost at each instant it changes pace.")
    cost_not_compared: str | None = Field(
        None,
        description="Why the on-demand line counts some instances at the price paid (no on-demand figure).",
    )
    metrics: dict[str, list[MetricPoint]] = Field(default_factory=dict)
    metric_summaries: list[MetricSummary] = Field(default_factory=list)
    gpu: list[GpuPoint] = Field(default_factory=list)
    telemetry_skipped_lines: int = 0
    telemetry_thinned: bool = False
    telemetry_unavailable: str | None = Field(
        None,
        description="Why the job's telemetry could not be read (the charts of metrics and GPUs are then empty).",
    )

"""A job's telemetry: the training metrics its script reported and its GPUs' readings, per attempt and node.

Each node's agent ships JSON lines to :func:`spotrun.model.layout.telemetry_key` parts, one line per event:

- ``{"kind": "metrics", "at": "<ISO 8601>", "step": 120, "values": {"loss": 0.41, "accuracy": 0.88}}``: what the
  script reported (:meth:`spotrun.training.Run.report_metrics`);
- ``{"kind": "gpu", "at": "<ISO 8601>", "gpus": [{"index": 0, "utilization": 97.0, "memory_used_mib": ...}]}``:
  one ``nvidia-smi`` sample of every GPU of the node.

The control plane reads the parts back (:func:`assemble`) into :class:`JobTelemetry`, the series the report, the
dashboard and ``spotrun status`` draw. Lines come from a user's instance, so each is validated here, at the edge,
and one that is not of its shape is skipped, never trusted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Final, Literal, TypeVar

from pydantic import Field, TypeAdapter, ValidationError

from spotrun.model.base import DeferredModel

GPU_MEMORY_HIGH_PERCENT: Final = 90.0
"""GPU memory use above which a node is flagged, before the out-of-memory error it announces."""
MAX_METRIC_NAMES: Final = (
    32  # names beyond these are dropped: a script's typo in a loop must not flood the record
)
MAX_METRIC_NAME_LENGTH: Final = 64
MAX_POINTS_PER_SERIES: Final = (
    2000  # what a chart can show; longer series are thinned evenly (see :func:`thin`)
)

T = TypeVar("T")

MetricName = Annotated[
    str, Field(min_length=1, max_length=MAX_METRIC_NAME_LENGTH, pattern=r"^[A-Za-z0-9_./:-]+$")
]


class MetricsLine(DeferredModel):
    """One report of the training script: metric values at a step."""

    kind: Literal["metrics"] = "metrics"
    at: datetime
    step: int | None = Field(default=None, ge=0)
    values: dict[MetricName, float] = Field(max_length=MAX_METRIC_NAMES)


class GpuReading(DeferredModel):
    """One GPU in one ``nvidia-smi`` sample."""

    index: int = Field(ge=0)
    utilization: float = Field(ge=0, le=100, description="utilization.gpu, percent")
    memory_used_mib: float = Field(ge=0)
    memory_total_mib: float = Field(gt=0)
    pcie_rx_mib_s: float | None = Field(default=None, ge=0, description="PCIe receive throughput, MiB/s")
    pcie_tx_mib_s: float | None = Field(default=None, ge=0, description="PCIe transmit throughput, MiB/s")

    @property
    def memory_percent(self) -> float:
        """Memory used, percent of the GPU's memory."""
        return self.memory_used_mib / self.memory_total_mib * 100.0


class GpuLine(DeferredModel):
    """One ``nvidia-smi`` sample of a node's GPUs."""

    kind: Literal["gpu"] = "gpu"
    at: datetime
    gpus: list[GpuReading] = Field(min_length=1, max_length=64)


TelemetryLine = Annotated[MetricsLine | GpuLine, Field(discriminator="kind")]
_LINE: TypeAdapter[MetricsLine | GpuLine] = TypeAdapter(TelemetryLine)


class MetricPoint(DeferredModel):
    """One value of one metric."""

    at: datetime
    attempt: int
    node: int
    step: int | None
    value: float


class GpuPoint(DeferredModel):
    """One GPU's reading at one time, with where it was."""

    at: datetime
    attempt: int
    node: int
    gpu: int
    utilization: float
    memory_percent: float
    pcie_rx_mib_s: float | None = None
    pcie_tx_mib_s: float | None = None


class JobTelemetry(DeferredModel):
    """A job's series, in time order: what the report and the dashboard chart."""

    metrics: dict[str, list[MetricPoint]] = Field(default_factory=dict)
    gpu: list[GpuPoint] = Field(default_factory=list)
    skipped_lines: int = Field(0, description="Lines not of a telemetry line's shape, left out.")
    thinned: bool = Field(
        False, description="Some series held more points than a chart shows; evenly thinned."
    )

    @property
    def memory_high(self) -> list[GpuPoint]:
        """The readings above :data:`GPU_MEMORY_HIGH_PERCENT` of a GPU's memory."""
        return [point for point in self.gpu if point.memory_percent > GPU_MEMORY_HIGH_PERCENT]


def parse_lines(text: str) -> tuple[list[MetricsLine | GpuLine], int]:
    """The telemetry lines of one part, and how many lines were skipped as not of their shape."""
    lines: list[MetricsLine | GpuLine] = []
    skipped = 0
    for raw in text.splitlines():
        if not raw.strip():
            continue
        try:
            line = _LINE.validate_python(json.loads(raw))
        except (ValueError, ValidationError):
            skipped += 1
            continue
        if isinstance(line, MetricsLine) and not all(math.isfinite(v) for v in line.values.values()):
            line = line.model_copy(
                update={"values": {k: v for k, v in line.values.items() if math.isfinite(v)}}
            )
        lines.append(line)
    return lines, skipped


def thin(points: list[T], limit: int = MAX_POINTS_PER_SERIES) -> list[T]:
    """At most ``limit`` of ``points``, evenly spaced, the first and the last kept."""
    if len(points) <= limit:
        return points
    if limit < 2:
        return points[-limit:] if limit else []
    last = len(points) - 1
    return [points[round(i * last / (limit - 1))] for i in range(limit)]


def assemble(parts: Iterable[tuple[int, int, str]], limit: int = MAX_POINTS_PER_SERIES) -> JobTelemetry:
    """A job's telemetry from its parts.

    Parameters
    ----------
    parts
        ``(attempt, node, text)`` of each part (:func:`spotrun.model.layout.parse_telemetry_key`), any order.
    limit
        The most points kept per metric, and per GPU of a node in an attempt (:func:`thin`).

    Returns
    -------
    JobTelemetry
        Every metric's points and every GPU reading, in time order.
    """
    metrics: dict[str, list[MetricPoint]] = {}
    gpu_series: dict[tuple[int, int, int], list[GpuPoint]] = {}
    skipped = 0
    for attempt, node, text in parts:
        lines, bad = parse_lines(text)
        skipped += bad
        for line in lines:
            if isinstance(line, MetricsLine):
                for name, value in line.values.items():
                    if name in metrics or len(metrics) < MAX_METRIC_NAMES:
                        point = MetricPoint(
                            at=line.at, attempt=attempt, node=node, step=line.step, value=value
                        )
                        metrics.setdefault(name, []).append(point)
                continue
            for reading in line.gpus:
                gpu_series.setdefault((attempt, node, reading.index), []).append(
                    GpuPoint(
                        at=line.at,
                        attempt=attempt,
                        node=node,
                        gpu=reading.index,
                        utilization=reading.utilization,
                        memory_percent=round(reading.memory_percent, 3),
                        pcie_rx_mib_s=reading.pcie_rx_mib_s,
                        pcie_tx_mib_s=reading.pcie_tx_mib_s,
                    )
                )
    thinned = False
    kept_metrics = {}
    for name, points in sorted(metrics.items()):
        points.sort(key=lambda p: p.at)
        kept_metrics[name] = thin(points, limit)
        thinned |= len(kept_metrics[name]) < len(points)
    gpu: list[GpuPoint] = []
    for series in gpu_series.values():
        series.sort(key=lambda p: p.at)
        kept = thin(series, limit)
        thinned |= len(kept) < len(series)
        gpu.extend(kept)
    gpu.sort(key=lambda p: (p.at, p.node, p.gpu))
    return JobTelemetry(metrics=kept_metrics, gpu=gpu, skipped_lines=skipped, thinned=thinned)

"""A job's GPU health and latest training metrics, read from its record and its telemetry.

Two sources, one picture. The job record keeps each node's latest ``nvidia-smi`` sample (``Attempt.gpu`` /
``NodeRun.gpu``, refreshed every few minutes from the agents' heartbeats) and its first reading of GPU memory
above 90 % in an attempt (``gpu_memory_high``); the job's telemetry (``GET /jobs/{id}/telemetry``) holds every
sample and every metric the script reported. Per node of the job's latest attempt the newer of the two samples
is shown; memory above :data:`~spotrun.model.job.telemetry.GPU_MEMORY_HIGH_PERCENT` is flagged wherever either
saw it, so that the warning is on screen before the out-of-memory error it announces.

The functions building the picture are pure (a :class:`Job` and a :class:`JobTelemetry` in, data out);
:mod:`spotrun.cli.display.gpu_health_render` turns it into rich tables and lines, and the JSON of ``status --json``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import ValidationError

from spotrun.cli.client import ApiError
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import Job
from spotrun.model.job.telemetry import GPU_MEMORY_HIGH_PERCENT, GpuLine, GpuPoint, JobTelemetry, MetricPoint

TELEMETRY_POLL_SECONDS = 5.0  # the live view's reads of the telemetry, at most this often


class TelemetrySource(Protocol):
    """What reads a job's telemetry: :class:`spotrun.cli.client.SpotrunClient`."""

    def telemetry(self, job_id: str) -> dict[str, Any]:
        """``GET /jobs/{id}/telemetry``."""
        ...


def read_telemetry(client: TelemetrySource, job_id: str) -> tuple[JobTelemetry | None, str | None]:
    """The job's telemetry, or None and why it could not be read (the API refused, or answered another shape).

    A job is still shown without its telemetry: from its record alone.
    """
    try:
        return JobTelemetry.model_validate(client.telemetry(job_id)), None
    except ApiError as exc:
        return None, f"telemetry unavailable: {exc}"
    except ValidationError as exc:
        return None, f"telemetry unreadable: {exc.error_count()} problem(s) in the API's answer"


@dataclass(frozen=True)
class GpuNow:
    """One GPU in a node's latest sample."""

    index: int
    utilization: float  # percent
    memory_percent: float
    memory_used_mib: float | None = None  # known from the record's sample, not from the telemetry's points
    memory_total_mib: float | None = None
    pcie_rx_mib_s: float | None = None
    pcie_tx_mib_s: float | None = None

    @property
    def memory_high(self) -> bool:
        """Whether its memory is above :data:`GPU_MEMORY_HIGH_PERCENT`."""
        return self.memory_percent > GPU_MEMORY_HIGH_PERCENT


@dataclass(frozen=True)
class NodeGpus:
    """A node's latest sample of its GPUs, and where it came from."""

    attempt: int
    node: int
    instance_id: str
    at: datetime
    gpus: tuple[GpuNow, ...]
    source: Literal["record", "telemetry"]


@dataclass(frozen=True)
class MemoryHigh:
    """A node's first reading of a GPU's memory above :data:`GPU_MEMORY_HIGH_PERCENT` in an attempt."""

    attempt: int
    node: int
    gpu: int
    percent: float
    at: datetime


def _from_record(attempt: Attempt, node: int, instance_id: str, line: GpuLine) -> NodeGpus:
    gpus = tuple(
        GpuNow(
            index=reading.index,
            utilization=reading.utilization,
            memory_percent=round(reading.memory_percent, 1),
            memory_used_mib=reading.memory_used_mib,
            memory_total_mib=reading.memory_total_mib,
            pcie_rx_mib_s=reading.pcie_rx_mib_s,
            pcie_tx_mib_s=reading.pcie_tx_mib_s,
        )
        for reading in sorted(line.gpus, key=lambda r: r.index)
    )
    return NodeGpus(attempt.number, node, instance_id, line.at, gpus, "record")


def _latest_points(telemetry: JobTelemetry | None, attempt: int) -> dict[int, dict[int, GpuPoint]]:
    """Node -> GPU -> its latest point, in ``attempt``."""
    latest: dict[int, dict[int, GpuPoint]] = {}
    for point in telemetry.gpu if telemetry is not None else []:
        if point.attempt != attempt:
            continue
        known = latest.setdefault(point.node, {}).get(point.gpu)
        if known is None or point.at >= known.at:
            latest[point.node][point.gpu] = point
    return latest


def latest_node_gpus(job: Job, telemetry: JobTelemetry | None) -> list[NodeGpus]:
    """Each node of the job's latest attempt with its newest GPU sample (the record's or the telemetry's).

    Returns
    -------
    list[NodeGpus]
        Node order; a node with no sample anywhere yet is left out (none at all before training starts).
    """
    if not job.attempts:
        return []
    attempt = job.attempts[-1]
    points = _latest_points(telemetry, attempt.number)
    found = []
    for node in attempt.node_runs():
        mine = points.get(node.node, {})
        newest = max((p.at for p in mine.values()), default=None)
        if node.gpu is not None and (newest is None or node.gpu.at >= newest):
            found.append(_from_record(attempt, node.node, node.instance_id, node.gpu))
        elif newest is not None:
            gpus = tuple(
                GpuNow(
                    index=p.gpu,
                    utilization=p.utilization,
                    memory_percent=round(p.memory_percent, 1),
                    pcie_rx_mib_s=p.pcie_rx_mib_s,
                    pcie_tx_mib_s=p.pcie_tx_mib_s,
                )
                for _, p in sorted(mine.items())
            )
            found.append(NodeGpus(attempt.number, node.node, node.instance_id, newest, gpus, "telemetry"))
    return found


def memory_high_flags(job: Job, telemetry: JobTelemetry | None) -> list[MemoryHigh]:
    """Every node of every attempt whose GPU memory went above 90 %: its first such reading, oldest first.

    The record's flag (``gpu_memory_high``) where it has one, else the telemetry's first point above.
    """
    flags: dict[tuple[int, int], MemoryHigh] = {}
    for attempt in job.attempts:
        for node in attempt.node_runs():
            if (high := node.gpu_memory_high) is not None:
                flags[(attempt.number, node.node)] = MemoryHigh(
                    attempt.number, node.node, high.gpu, high.percent, high.at
                )
    for point in sorted(telemetry.gpu if telemetry is not None else [], key=lambda p: p.at):
        key = (point.attempt, point.node)
        if point.memory_percent > GPU_MEMORY_HIGH_PERCENT and key not in flags:
            flags[key] = MemoryHigh(
                point.attempt, point.node, point.gpu, round(point.memory_percent, 1), point.at
            )
    return sorted(flags.values(), key=lambda flag: flag.at)


def latest_metrics(telemetry: JobTelemetry | None) -> dict[str, MetricPoint]:
    """Each metric's latest value (its name in the order the telemetry lists them).

    The last point of each series: the telemetry lists them in time order, and several reports read by the agent
    at once share their time (the order they were reported in is kept among them).
    """
    if telemetry is None:
        return {}
    return {name: points[-1] for name, points in telemetry.metrics.items() if points}


class TelemetryPoll:
    """The job's telemetry for the live view, read at most every ``every`` seconds (each read lists and reads
    the job's parts in S3: far more than the record's one item, so not at every poll of the job).

    A read that fails keeps the last one read.
    """

    def __init__(
        self,
        client: TelemetrySource,
        job_id: str,
        every: float = TELEMETRY_POLL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._client = client
        self._job_id = job_id
        self._every = every
        self._clock = clock
        self._last_read: float | None = None
        self._telemetry: JobTelemetry | None = None

    def poll(self) -> JobTelemetry | None:
        """The latest telemetry read (read again when ``every`` seconds have passed)."""
        now = self._clock()
        if self._last_read is None or now - self._last_read >= self._every:
            self._last_read = now
            telemetry, _ = read_telemetry(self._client, self._job_id)
            if telemetry is not None:
                self._telemetry = telemetry
        return self._telemetry

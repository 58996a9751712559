"""The job's telemetry from one node: the script's training metrics and the GPU samples, put as JSON-line parts.

The script appends ``{"step": n, "values": {...}}`` lines to ``$SPOTRUN_METRICS_FILE``
(:meth:`spotrun.training.Run.report_metrics`); :class:`TelemetryShipper` tails that file by byte offset (a last
line without its newline yet waits for the next read), validates each line into a
:class:`~spotrun.model.job.telemetry.MetricsLine` stamped with the time it was read, and gathers the GPU samples
(:class:`~spotrun.model.job.telemetry.GpuLine`) the GPU monitor hands it. Every ``AgentCommand.telemetry_seconds``
(:meth:`TelemetryShipper.ship_quietly` on a ticker) the lines gathered since the last put go, in time order, as the
next part at :func:`spotrun.model.layout.telemetry_key` (node: the command's group node, 0 for one node); the
train step ships once more when training ends, whatever the end (completed, failed, interrupted, stopped).

Bounds, so that a script reporting every step of a week-long run cannot flood the bucket or the reader
(``spotrun.control`` assembles every part of a job):

- a part holds at most :data:`MAX_METRICS_LINES_PER_PART` metrics lines; more are thinned evenly (the first and
  the last kept), as the report's charts thin a longer series;
- one node ships at most :data:`MAX_BYTES_PER_ATTEMPT` per attempt; past it nothing more is put (logged once);
- a line longer than :data:`MAX_LINE_BYTES` is skipped; one read takes the last :data:`MAX_READ_BYTES` written
  since the previous one at most: a script writing faster loses the older lines of the interval (logged), rather
  than the agent falling ever further behind.

Lines that are not a report's shape are skipped (the script's own checks make them rare) and counted; the first
few are logged with the reason. On AWS the training metrics also go to CloudWatch (namespace ``spotrun``, the
metric's name as ``MetricName``, dimension ``JobId``) through the GPU monitor's metrics port, at most
:data:`CLOUDWATCH_BATCH` values per ``PutMetricData`` call.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from spotrun.agent.links import LinkError, open_regular
from spotrun.agent.periodic import Ticker
from spotrun.agent.supervision.gpu import NAMESPACE, GpuMonitor, MetricsPort, metrics_interval
from spotrun.agent.supervision.hang import HangWatch
from spotrun.agent.supervision.idle import IdleWatch
from spotrun.model import layout
from spotrun.model.agent_protocol.command import AgentCommand
from spotrun.model.job.telemetry import GpuLine, MetricsLine, thin

logger = logging.getLogger(__name__)

MAX_METRICS_LINES_PER_PART: Final = 1000
MAX_BYTES_PER_ATTEMPT: Final = 64 * 1024 * 1024
MAX_LINE_BYTES: Final = 16 * 1024
MAX_READ_BYTES: Final = 4 * 1024 * 1024
# "Each request is also limited to no more than 1000 different metrics"
# (https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricData.html).
CLOUDWATCH_BATCH: Final = 1000
_LOGGED_SKIPS: Final = 5
CONTENT_TYPE: Final = "application/x-ndjson"
# A report's own time is kept when it is at most this old at its read: the agent reads every few seconds.
MAX_REPORT_AGE: Final = timedelta(hours=1)


def metrics_file(runtime_dir: Path, attempt: int) -> Path:
    """The attempt's metrics file (``SPOTRUN_METRICS_FILE``), beside its progress file."""
    return runtime_dir / f"metrics-attempt-{attempt:03d}.jsonl"


def parse_report(raw: bytes, at: datetime) -> MetricsLine:
    """One line of the metrics file as a :class:`MetricsLine` read at ``at``.

    The line's own ``at`` (Unix seconds, :class:`spotrun.training.metrics.MetricsFile` stamps it) is its time when it
    lies within :data:`MAX_REPORT_AGE` before ``at``; otherwise (missing, in the future, too old) ``at`` is.
    Values that are not finite are left out (``json`` reads ``NaN``); a report left with none is refused.

    Raises
    ------
    ValueError
        When the line is not a ``{"step": n, "values": {...}}`` object of valid names and numbers.
    """
    document = json.loads(raw)
    if not isinstance(document, dict) or not isinstance(document.get("values"), dict):
        raise ValueError('not a {"step": n, "values": {...}} object')
    values = {
        name: value
        for name, value in document["values"].items()
        if not (isinstance(value, float) and not math.isfinite(value))
    }
    if not values:
        raise ValueError("no finite value")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values.values()):
        raise ValueError("a value is not a number")
    step = document.get("step")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        raise ValueError("the step is not an integer")
    stamped = document.get("at")
    if isinstance(stamped, int | float) and not isinstance(stamped, bool) and math.isfinite(stamped):
        written = datetime.fromtimestamp(stamped, UTC) if abs(stamped) < 1e11 else None
        if written is not None and at - MAX_REPORT_AGE <= written <= at:
            at = written
    try:
        return MetricsLine(at=at, step=step, values=values)
    except ValidationError as exc:
        raise ValueError(str(exc.errors()[0]["msg"])) from None


class TelemetryShipper:
    """Tails one attempt's metrics file, gathers the node's GPU samples, and puts them as numbered parts.

    Parameters
    ----------
    s3
        A boto3 S3 client (the job's credentials, which may write the attempt's telemetry prefix).
    bucket, job_id, attempt, node
        Where the parts go (:func:`spotrun.model.layout.telemetry_key`).
    metrics_path
        The metrics file; missing until the script first reports.
    metrics
        CloudWatch, for the training metrics; None: not published there.
    clock
        Stamps each metrics line with the time it was read (UTC).
    max_lines, max_bytes
        :data:`MAX_METRICS_LINES_PER_PART` and :data:`MAX_BYTES_PER_ATTEMPT`.
    """

    def __init__(
        self,
        s3: Any,
        bucket: str,
        job_id: str,
        attempt: int,
        node: int,
        metrics_path: Path,
        *,
        metrics: MetricsPort | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_lines: int = MAX_METRICS_LINES_PER_PART,
        max_bytes: int = MAX_BYTES_PER_ATTEMPT,
    ):
        self.s3 = s3
        self.bucket = bucket
        self.job_id = job_id
        self.attempt = attempt
        self.node = node
        self.metrics_path = metrics_path
        self.metrics = metrics
        self.clock = clock
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.skipped = 0  # lines of the metrics file not of a report's shape
        self.skipped_bytes = 0  # written faster than read: left behind (MAX_READ_BYTES)
        self.thinned = 0  # metrics lines left out of full parts
        self.shipped_bytes = 0
        self.exhausted = False
        self._offset = 0
        self._partial = b""
        self._discarding = False  # inside an overlong line: skip up to its newline
        self._pending: list[MetricsLine | GpuLine] = []
        self._next_part: int | None = None
        self._lock = threading.Lock()  # _pending, between the GPU monitor's thread and the shipper's
        self._ship_lock = threading.Lock()  # one put at a time: the ticker's and the final one

    def add_gpu(self, line: GpuLine) -> None:
        """Gather one GPU sample for the next part (a :class:`~spotrun.agent.supervision.gpu.GpuMonitor` listener)."""
        with self._lock:
            self._pending.append(line)

    def read_metrics(self) -> int:
        """Read the metrics file's new complete lines into the next part; the number of reports read."""
        try:
            with open_regular(self.metrics_path) as handle:
                size = handle.seek(0, 2)
                if size < self._offset:  # replaced or truncated: a new file, read from its start
                    self._offset, self._partial, self._discarding = 0, b"", False
                if size - self._offset > MAX_READ_BYTES:
                    # Behind by more than one read: keep the newest lines, from the next line's start.
                    self.skipped_bytes += size - MAX_READ_BYTES - self._offset
                    logger.warning(
                        "metrics file %s: %d bytes written faster than they are shipped, skipped",
                        self.metrics_path.name,
                        size - MAX_READ_BYTES - self._offset,
                    )
                    self._offset, self._partial, self._discarding = size - MAX_READ_BYTES, b"", True
                handle.seek(self._offset)
                chunk = handle.read(MAX_READ_BYTES)
        except FileNotFoundError:
            return 0
        except (LinkError, OSError) as exc:
            logger.warning("cannot read the metrics file %s: %s", self.metrics_path, exc)
            return 0
        self._offset += len(chunk)
        *complete, partial = (self._partial + chunk).split(b"\n")
        if self._discarding:  # the rest of an overlong line, already counted
            if complete:
                complete, self._discarding = complete[1:], False
            else:
                partial = b""
        if len(partial) > MAX_LINE_BYTES:
            partial, self._discarding = b"", True
            self._skip(f"a line longer than {MAX_LINE_BYTES} bytes")
        self._partial = partial
        now = self.clock()
        lines = []
        for raw in complete:
            if not raw.strip():
                continue
            if len(raw) > MAX_LINE_BYTES:
                self._skip(f"a line longer than {MAX_LINE_BYTES} bytes")
                continue
            try:
                lines.append(parse_report(raw, now))
            except ValueError as exc:
                self._skip(str(exc))
        with self._lock:
            self._pending.extend(lines)
        return len(lines)

    def _skip(self, reason: str) -> None:
        self.skipped += 1
        if self.skipped <= _LOGGED_SKIPS:
            logger.warning("metrics file %s: line skipped (%s)", self.metrics_path.name, reason)

    def ship(self) -> str | None:
        """Put what was gathered since the last put as the next part; its key, or None when nothing was put.

        Raises
        ------
        Exception
            What S3 raised; the lines are kept for the next put.
        """
        with self._ship_lock:
            self.read_metrics()
            with self._lock:
                lines, self._pending = self._pending, []
            if not lines or self.exhausted:
                return None
            lines = self._bounded(lines)
            body = "".join(line.model_dump_json() + "\n" for line in lines).encode()
            if self.shipped_bytes + len(body) > self.max_bytes:
                self.exhausted = True
                logger.warning(
                    "telemetry of attempt %d node %d reached %d bytes: later lines are not shipped",
                    self.attempt,
                    self.node,
                    self.max_bytes,
                )
                return None
            try:
                part = self._part()
                key = layout.telemetry_key(self.job_id, self.attempt, self.node, part)
                self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType=CONTENT_TYPE)
            except Exception:
                with self._lock:
                    self._pending = lines + self._pending
                raise
            self._next_part = part + 1
            self.shipped_bytes += len(body)
            self._publish([line for line in lines if isinstance(line, MetricsLine)])
            return key

    def ship_quietly(self) -> bool:
        """:meth:`ship`, logging a failure (a ticker's action); always True: keep ticking."""
        try:
            self.ship()
        except Exception as exc:
            logger.warning("telemetry not put (kept for the next put): %s", exc)
        return True

    def _bounded(self, lines: list[MetricsLine | GpuLine]) -> list[MetricsLine | GpuLine]:
        """``lines`` in time order, their metrics lines thinned to :attr:`max_lines`."""
        reports = [line for line in lines if isinstance(line, MetricsLine)]
        if len(reports) > self.max_lines:
            kept = {id(line) for line in thin(reports, self.max_lines)}
            self.thinned += len(reports) - len(kept)
            logger.info("telemetry part thinned to %d of %d metrics lines", self.max_lines, len(reports))
            lines = [line for line in lines if not isinstance(line, MetricsLine) or id(line) in kept]
        return sorted(lines, key=lambda line: line.at)

    def _part(self) -> int:
        """The next part's number: after the highest already under the prefix (a rerun of the step keeps them)."""
        if self._next_part is None:
            first = layout.telemetry_key(self.job_id, self.attempt, self.node, 1)
            prefix = first.rsplit("/", 1)[0] + "/"
            highest = 0
            paginator = self.s3.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    parsed = layout.parse_telemetry_key(item["Key"])
                    if parsed is not None:
                        highest = max(highest, parsed[2])
            self._next_part = highest + 1
        return self._next_part

    def _publish(self, reports: Iterable[MetricsLine]) -> None:
        """The training metrics to CloudWatch, in batches; a failure is logged (the part is already put)."""
        if self.metrics is None:
            return
        data = cloudwatch_data(self.job_id, reports)
        try:
            for start in range(0, len(data), CLOUDWATCH_BATCH):
                self.metrics.put(NAMESPACE, data[start : start + CLOUDWATCH_BATCH])
        except Exception as exc:
            logger.warning("training metrics not put to CloudWatch: %s", exc)


def cloudwatch_data(job_id: str, reports: Iterable[MetricsLine]) -> list[dict[str, Any]]:
    """``PutMetricData`` entries of ``reports``: one per value, named as reported, with the ``JobId`` dimension."""
    dimension = [{"Name": "JobId", "Value": job_id}]
    return [
        {"MetricName": name, "Dimensions": dimension, "Timestamp": line.at, "Value": value}
        for line in reports
        for name, value in line.values.items()
    ]


# An idle verdict comes at the first sample after the window: at most this share of it late.
IDLE_SAMPLES_PER_WINDOW: Final = 4


def sample_seconds(command: AgentCommand) -> float:
    """Seconds between two GPU samples of a train step.

    :func:`~spotrun.agent.supervision.gpu.metrics_interval` (a minute at the production poll), no longer than
    ``telemetry_seconds`` (each part then holds a sample), and with ``gpu_idle`` at most a quarter of its
    seconds (its verdict then comes at most a quarter of the window late).
    """
    seconds = min(metrics_interval(command.poll_seconds), command.telemetry_seconds)
    if command.gpu_idle is not None:
        seconds = min(seconds, command.gpu_idle.seconds / IDLE_SAMPLES_PER_WINDOW)
    return seconds


@contextlib.contextmanager
def node_telemetry(
    command: AgentCommand,
    s3: Any,
    metrics_path: Path,
    *,
    metrics: MetricsPort | None = None,
    instance_id: Callable[[], str | None] = lambda: None,
    latest: Callable[[GpuLine], None] = lambda line: None,
    hang: HangWatch | None = None,
    idle: IdleWatch | None = None,
) -> Iterator[TelemetryShipper]:
    """Sample the GPUs and put the telemetry while the block runs; the caller makes the last put.

    Each sample goes to the shipper, to ``latest`` (the heartbeats carry it), to the idle watch, to the hang
    watch (as evidence for its message) and, with ``metrics``, to CloudWatch. The shipper puts a part every
    ``command.telemetry_seconds``; when the block ends the tickers stop, and the caller calls
    :meth:`TelemetryShipper.ship_quietly` once more after the checkpoint's final upload, which comes first.

    Parameters
    ----------
    command
        The train command.
    s3
        Puts the parts (the job's credentials).
    metrics_path
        The attempt's metrics file (:func:`metrics_file`).
    metrics
        CloudWatch, for the GPU and the training metrics; None: not published there.
    instance_id
        The GPU metrics' ``InstanceId`` dimension.
    latest
        Told each sample: the node's latest, for the heartbeats.
    hang, idle
        The step's watches, if any.

    Yields
    ------
    TelemetryShipper
        The shipper.
    """
    node = command.group.node if command.group is not None else 0
    shipper = TelemetryShipper(
        s3, command.jobs_bucket, command.job_id, command.attempt, node, metrics_path, metrics=metrics
    )
    listeners: list[Callable[[GpuLine], None]] = [shipper.add_gpu, latest]
    if idle is not None:
        listeners.append(idle.observe)
    evidence = None if hang is None else (lambda summary: hang.observe_gpu(summary.utilization))
    monitor = GpuMonitor(metrics, command.job_id, instance_id, on_summary=evidence, on_sample=listeners)
    sampling = Ticker(sample_seconds(command), monitor.sample_quietly, "gpu-sampling").start()
    shipping = Ticker(command.telemetry_seconds, shipper.ship_quietly, "telemetry", immediately=False).start()
    try:
        yield shipper
    finally:
        # A hung nvidia-smi or put must not delay the checkpoint upload that follows.
        sampling.stop(timeout=1.0)
        shipping.stop(timeout=1.0)

"""GPU use while training, from ``nvidia-smi``: one sample of every GPU, for the telemetry, the heartbeat, the idle
watch and CloudWatch.

Each sample (:class:`GpuMonitor`, when ``nvidia-smi`` is on ``PATH``; without it, nothing happens at all) runs

- ``nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total --format=csv,noheader,nounits``: one
  line per GPU, memory in MiB (``nounits`` drops the ``MiB`` the header would name);
- ``nvidia-smi dmon --select t --count 1``: one sample of each GPU's PCIe receive and transmit throughput
  (``rxpci``, ``txpci``), after dmon's two ``#`` header lines (the names, then the units, ``MB/s``). NVIDIA's
  man page names the unit MB/s ("t - PCIe Rx and Tx Throughput in MB/s",
  https://docs.nvidia.com/deploy/nvidia-smi/index.html); spotrun reads MB as the SI unit it names (10^6 bytes;
  were it 2^20 bytes, the figures would read 4.6 % low) and converts to MiB/s
  (x 10^6 / 2^20) for :class:`~spotrun.model.job.telemetry.GpuReading`. A GPU or driver that does not measure it
  prints ``-``: no PCIe figure then. dmon failing leaves the sample without PCIe figures, not without a sample;

and becomes a :class:`~spotrun.model.job.telemetry.GpuLine`, handed to each listener (the telemetry shipper, the
idle watch, the heartbeat's latest). With a CloudWatch port it also puts two metrics in the ``spotrun``
namespace, each twice, once per dimension:

- ``GPUUtilization`` (Percent): the mean of ``utilization.gpu`` over the instance's GPUs;
- ``GPUMemoryUtilization`` (Percent): the highest ``memory.used / memory.total * 100`` among them;

with the dimension ``InstanceId`` (from IMDS; left out when unknown) and ``JobId``. Failures are logged, never
raised: metrics must not disturb training.
"""

from __future__ import annotations

import logging
import math
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from spotrun.agent.imds import ImdsClient, ImdsError
from spotrun.model.capacity.instance_types import GPU_CATALOG
from spotrun.model.job.telemetry import GpuLine, GpuReading

logger = logging.getLogger(__name__)

NAMESPACE = "spotrun"
GPU_UTILIZATION = "GPUUtilization"
GPU_MEMORY_UTILIZATION = "GPUMemoryUtilization"
QUERY_ARGS = (
    "--query-gpu=index,utilization.gpu,memory.used,memory.total",
    "--format=csv,noheader,nounits",
)
DMON_ARGS = ("dmon", "--select", "t", "--count", "1")
# dmon's MB/s (10^6 bytes a second) in MiB/s (2^20 bytes a second).
MB_PER_MIB = 1_000_000 / 2**20
# One sample a minute at the production poll of 5 s; the emulator's scaled poll scales it alike.
POLLS_PER_MINUTE = 12
NVIDIA_SMI_TIMEOUT_SECONDS = 10.0
# One line per GPU, "GPU 0: NVIDIA A10G (UUID: GPU-...)": whatever the driver cannot measure, it still lists.
LIST_GPUS_ARGS = ("--list-gpus",)


@dataclass(frozen=True)
class GpuSummary:
    """What is published for the whole instance."""

    utilization: float  # mean over the GPUs, percent
    memory_utilization: float  # highest used/total over the GPUs, percent
    gpus: int


class GpuReadError(RuntimeError):
    """``nvidia-smi`` is there but failed."""


def metrics_interval(poll_seconds: float) -> float:
    """Seconds between two samples: 60 s * (``poll_seconds`` / 5)."""
    return POLLS_PER_MINUTE * poll_seconds


def parse_nvidia_smi(text: str) -> list[GpuReading]:
    """Parse ``index, utilization.gpu, memory.used, memory.total`` lines.

    A line with ``[N/A]``, ``[Not Supported]`` or garbage in a field, or a zero total, is skipped: that GPU has
    no reading in the sample.
    """
    readings = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 4:
            continue
        try:
            index = int(fields[0])
            utilization, used, total = (float(field) for field in fields[1:])
        except ValueError:
            continue
        if not (index >= 0 and 0 <= utilization <= 100 and used >= 0 and total > 0):
            continue
        if not all(math.isfinite(value) for value in (utilization, used, total)):
            continue
        readings.append(
            GpuReading(index=index, utilization=utilization, memory_used_mib=used, memory_total_mib=total)
        )
    return readings


def parse_dmon(text: str) -> dict[int, tuple[float | None, float | None]]:
    """PCIe ``(rx, tx)`` in MiB/s by GPU index, from ``nvidia-smi dmon --select t --count 1``.

    The columns are found by the first header line's names (``# gpu rxpci txpci``); the second (``# Idx MB/s
    MB/s``) names the units. A ``-`` (not measured) is None; a line that is not a GPU's row is skipped.
    """
    columns: list[str] | None = None
    found: dict[int, tuple[float | None, float | None]] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "#":
            fields = fields[1:]
        elif fields[0].startswith("#"):
            fields = [fields[0][1:], *fields[1:]]
        else:
            if columns is None or "gpu" not in columns or len(fields) != len(columns):
                continue
            row = dict(zip(columns, fields, strict=True))
            try:
                index = int(row["gpu"])
            except ValueError:
                continue
            found[index] = (_mib_s(row.get("rxpci")), _mib_s(row.get("txpci")))
            continue
        if columns is None and "gpu" in fields:
            columns = fields  # the names; the units line after it is not a names line
    return found


def _mib_s(field: str | None) -> float | None:
    try:
        value = float(field) if field is not None else math.nan
    except ValueError:
        return None
    return round(value * MB_PER_MIB, 3) if math.isfinite(value) and value >= 0 else None


def read_nvidia_smi(timeout: float = NVIDIA_SMI_TIMEOUT_SECONDS) -> list[GpuReading] | None:
    """Every GPU's reading, with its PCIe throughput when dmon gives it; None when ``nvidia-smi`` is not on
    ``PATH`` (an instance without NVIDIA GPUs).

    Raises
    ------
    GpuReadError
        When the query exits non-zero or does not answer within ``timeout`` (dmon failing is only logged).
    """
    output = _nvidia_smi(QUERY_ARGS, timeout)
    if output is None:
        return None
    readings = parse_nvidia_smi(output)
    if not readings:
        return readings
    try:
        pcie = parse_dmon(_nvidia_smi(DMON_ARGS, timeout) or "")
    except GpuReadError as exc:
        logger.info("no PCIe throughput this sample: %s", exc)
        return readings
    return [
        reading.model_copy(
            update={"pcie_rx_mib_s": pcie[reading.index][0], "pcie_tx_mib_s": pcie[reading.index][1]}
        )
        if reading.index in pcie
        else reading
        for reading in readings
    ]


def _nvidia_smi(args: Sequence[str], timeout: float) -> str | None:
    """``nvidia-smi ARGS``' output; None when it is not on ``PATH``; GpuReadError when it fails or hangs."""
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return None
    try:
        done = subprocess.run(
            [executable, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except (subprocess.TimeoutExpired, OSError) as exc:
        raise GpuReadError(f"nvidia-smi: {exc}") from exc
    if done.returncode != 0:
        raise GpuReadError(f"nvidia-smi exited {done.returncode}: {done.stderr.strip()[:200]}")
    return done.stdout


def summarize(readings: list[GpuReading]) -> GpuSummary | None:
    """Mean utilization and highest memory use over the GPUs; None without a usable reading."""
    if not readings:
        return None
    utilization = sum(r.utilization for r in readings) / len(readings)
    memory = max(r.memory_percent for r in readings)
    return GpuSummary(round(utilization, 3), round(memory, 3), len(readings))


def metric_data(
    summary: GpuSummary, *, job_id: str, instance_id: str | None, timestamp: datetime
) -> list[dict[str, Any]]:
    """The ``MetricData`` of ``put_metric_data``: each metric once per dimension (InstanceId, JobId)."""
    dimensions = [[{"Name": "JobId", "Value": job_id}]]
    if instance_id:
        dimensions.insert(0, [{"Name": "InstanceId", "Value": instance_id}])
    return [
        {
            "MetricName": name,
            "Dimensions": dimension,
            "Timestamp": timestamp,
            "Value": value,
            "Unit": "Percent",
        }
        for name, value in (
            (GPU_UTILIZATION, summary.utilization),
            (GPU_MEMORY_UTILIZATION, summary.memory_utilization),
        )
        for dimension in dimensions
    ]


class MetricsPort(Protocol):
    """Where metrics go."""

    def put(self, namespace: str, data: list[dict[str, Any]]) -> None:
        """Publish ``data`` (``MetricData`` entries) in ``namespace``."""


class CloudWatchMetrics:
    """:class:`MetricsPort` on ``cloudwatch.put_metric_data``."""

    def __init__(self, client: Any):
        self.client = client

    def put(self, namespace: str, data: list[dict[str, Any]]) -> None:
        """Send ``data`` in one call."""
        self.client.put_metric_data(Namespace=namespace, MetricData=data)


class CachedInstanceId:
    """The instance id from IMDS, asked once it is first needed and then kept; None off EC2."""

    def __init__(self, imds: ImdsClient):
        self.imds = imds
        self._value: str | None = None

    def __call__(self) -> str | None:
        if self._value is None:
            try:
                self._value = self.imds.instance_id()
            except ImdsError as exc:
                logger.info("instance id unknown, GPU metrics carry the job only: %s", exc)
        return self._value


class GpuMonitor:
    """Samples the GPUs, hands each sample to its listeners and publishes the summary; one :meth:`sample_quietly`
    per tick.

    Parameters
    ----------
    metrics
        Where the CloudWatch metrics go; None: not published (the sample still reaches the listeners).
    job_id
        The ``JobId`` dimension.
    instance_id
        Returns the ``InstanceId`` dimension, or None when it is unknown.
    reader
        Reads the GPUs; None means there is no ``nvidia-smi``.
    namespace
        The CloudWatch namespace.
    on_summary
        Also told each summary, before it is published (the hang watch keeps the readings as evidence).
    on_sample
        Told each sample of the node's GPUs, in order (the telemetry shipper, the idle watch, the heartbeat's
        latest). A listener that raises is logged; the others are still told.
    clock
        The time a sample is stamped with (UTC).
    """

    def __init__(
        self,
        metrics: MetricsPort | None,
        job_id: str,
        instance_id: Callable[[], str | None],
        reader: Callable[[], list[GpuReading] | None] = read_nvidia_smi,
        namespace: str = NAMESPACE,
        on_summary: Callable[[GpuSummary], None] | None = None,
        on_sample: Sequence[Callable[[GpuLine], None]] = (),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        self.metrics = metrics
        self.job_id = job_id
        self.instance_id = instance_id
        self.reader = reader
        self.namespace = namespace
        self.on_summary = on_summary
        self.on_sample = list(on_sample)
        self.clock = clock
        self.latest: GpuLine | None = None

    def sample(self) -> GpuSummary | None:
        """Read and publish once; None (and nothing published) without ``nvidia-smi`` or a usable reading."""
        readings = self.reader()
        return None if readings is None else self.sample_readings(readings)

    def sample_quietly(self) -> bool:
        """:meth:`sample`, logging failures; False once it is known there is no ``nvidia-smi`` (stop ticking)."""
        try:
            readings = self.reader()
        except Exception as exc:
            logger.warning("could not read the GPUs: %s", exc)
            return True
        if readings is None:
            return False
        try:
            self.sample_readings(readings)
        except Exception as exc:
            logger.warning("could not publish GPU metrics: %s", exc)
        return True

    def sample_readings(self, readings: list[GpuReading]) -> GpuSummary | None:
        """Hand ``readings`` to the listeners as one sample, and publish their summary."""
        summary = summarize(readings)
        if summary is None:
            return None
        now = self.clock()
        line = GpuLine(at=now, gpus=readings[:64])
        self.latest = line
        for listener in self.on_sample:
            try:
                listener(line)
            except Exception:
                logger.exception("a GPU sample's listener failed")
        if self.on_summary is not None:
            self.on_summary(summary)
        if self.metrics is not None:
            data = metric_data(summary, job_id=self.job_id, instance_id=self.instance_id(), timestamp=now)
            self.metrics.put(self.namespace, data)
        return summary


def list_nvidia_gpus(timeout: float = NVIDIA_SMI_TIMEOUT_SECONDS) -> int | None:
    """GPUs ``nvidia-smi --list-gpus`` lists; None when it is not on ``PATH``, fails or does not answer."""
    try:
        output = _nvidia_smi(LIST_GPUS_ARGS, timeout)
    except GpuReadError as exc:
        logger.warning("nvidia-smi --list-gpus: %s", exc)
        return None
    if output is None:
        return None
    return sum(1 for line in output.splitlines() if line.startswith("GPU "))


def count_gpus(imds: ImdsClient | None, lister: Callable[[], int | None] = list_nvidia_gpus) -> int:
    """GPUs on this instance, for ``SPOTRUN_GPUS_PER_NODE``.

    ``nvidia-smi`` is asked first (the driver knows best); without it (the emulator, a CPU host, a broken driver)
    the instance type from IMDS (``meta-data/instance-type``) is looked up in spotrun's GPU catalog.

    Parameters
    ----------
    imds
        The metadata service; None: not asked.
    lister
        Counts the GPUs the driver sees; None when it cannot.

    Returns
    -------
    int
        The count; 0 when neither knows (an unknown type, or no IMDS: not on EC2).
    """
    listed = lister()
    if listed:
        return listed
    if imds is None:
        return 0
    try:
        instance_type = imds.instance_type()
    except ImdsError as exc:
        logger.info("instance type unknown, SPOTRUN_GPUS_PER_NODE is 0: %s", exc)
        return 0
    info = GPU_CATALOG.get(instance_type)
    return info.gpus if info is not None else 0

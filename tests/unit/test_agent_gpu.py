"""GPU samples: nvidia-smi (its query and dmon) read through PATH, handed to listeners as telemetry GpuLines,
summarized, and published to CloudWatch (moto)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from spotrun.agent.supervision.gpu import (
    MB_PER_MIB,
    CloudWatchMetrics,
    GpuMonitor,
    metrics_interval,
    parse_dmon,
    parse_nvidia_smi,
    read_nvidia_smi,
    summarize,
)
from spotrun.model.job.telemetry import GpuLine, GpuReading

REGION = "us-east-1"
INSTANCE = "i-0123456789abcdef0"


def fake_nvidia_smi(directory: Path, body: str) -> Path:
    """An executable ``nvidia-smi`` in ``directory`` running the shell ``body``."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


# nvidia-smi's own shapes: the query's CSV without header or units, and dmon's two "#" lines before its rows.
QUERY_CASE = "*--query-gpu=index,utilization.gpu,memory.used,memory.total*--format=csv,noheader,nounits*"
DMON_CASE = "dmon --select t --count 1"
DMON_OUTPUT = "# gpu  rxpci  txpci\n# Idx   MB/s   MB/s\n    0    100    200\n    1      -      -"


@pytest.fixture
def two_gpus(tmp_path, monkeypatch) -> Path:
    script = fake_nvidia_smi(
        tmp_path / "bin",
        f'case "$*" in\n  {QUERY_CASE}) printf "0, 40, 2048, 16384\\n1, 80, 12288, 16384\\n";;\n'
        f'  "{DMON_CASE}") printf "{DMON_OUTPUT}\\n";;\n  *) exit 9;;\nesac',
    )
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    return script


@pytest.fixture
def cloudwatch(monkeypatch) -> Iterator[Any]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield boto3.client("cloudwatch", region_name=REGION)


class RecordingMetrics:
    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[tuple[str, list[dict[str, Any]]]] = []
        self.error = error

    def put(self, namespace: str, data: list[dict[str, Any]]) -> None:
        if self.error is not None:
            raise self.error
        self.calls.append((namespace, data))


def average(client: Any, metric: str, dimension: dict[str, str]) -> list[float]:
    now = datetime.now(UTC)
    points = client.get_metric_statistics(
        Namespace="spotrun",
        MetricName=metric,
        Dimensions=[dimension],
        StartTime=now - timedelta(minutes=10),
        EndTime=now + timedelta(minutes=10),
        Period=60,
        Statistics=["Average"],
    )["Datapoints"]
    return [point["Average"] for point in points]


def test_the_mean_utilization_and_the_fullest_memory_are_published_per_instance_and_per_job(
    two_gpus, cloudwatch
):
    # Given two GPUs at 40 % and 80 %, with 12.5 % and 75 % of their memory used
    monitor = GpuMonitor(CloudWatchMetrics(cloudwatch), "j-1", lambda: INSTANCE)

    # When the monitor samples once
    assert monitor.sample_quietly() is True

    # Then both metrics exist in the spotrun namespace, each with an InstanceId and a JobId dimension
    listed = cloudwatch.list_metrics(Namespace="spotrun")["Metrics"]
    assert sorted((m["MetricName"], m["Dimensions"][0]["Name"]) for m in listed) == [
        ("GPUMemoryUtilization", "InstanceId"),
        ("GPUMemoryUtilization", "JobId"),
        ("GPUUtilization", "InstanceId"),
        ("GPUUtilization", "JobId"),
    ]
    assert all(len(m["Dimensions"]) == 1 for m in listed)
    # and carry the mean utilization and the highest memory use
    for dimension in ({"Name": "InstanceId", "Value": INSTANCE}, {"Name": "JobId", "Value": "j-1"}):
        assert average(cloudwatch, "GPUUtilization", dimension) == [60.0]
        assert average(cloudwatch, "GPUMemoryUtilization", dimension) == [75.0]


def test_without_nvidia_smi_nothing_is_read_or_published(tmp_path, monkeypatch):
    # Given a PATH without nvidia-smi
    monkeypatch.setenv("PATH", str(tmp_path))
    metrics = RecordingMetrics()
    asked: list[str] = []

    def instance_id() -> str:
        asked.append("asked")
        return INSTANCE

    monitor = GpuMonitor(metrics, "j-1", instance_id)

    # When it samples
    ticking = monitor.sample_quietly()

    # Then nothing happened, not even an IMDS lookup, and the ticker is told to stop
    assert read_nvidia_smi() is None
    assert ticking is False
    assert metrics.calls == []
    assert asked == []


def test_failures_to_read_or_publish_are_logged_not_raised(tmp_path, monkeypatch, caplog, two_gpus):
    # Given an nvidia-smi that works and a metrics port that fails
    monitor = GpuMonitor(RecordingMetrics(ConnectionError("no route")), "j-1", lambda: None)

    # When it samples / Then it goes on
    assert monitor.sample_quietly() is True
    assert "could not publish GPU metrics: no route" in caplog.text

    # Given an nvidia-smi that fails
    broken = fake_nvidia_smi(tmp_path / "broken", "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    monkeypatch.setenv("PATH", str(broken.parent))
    metrics = RecordingMetrics()

    # When it samples / Then it goes on, publishing nothing
    assert GpuMonitor(metrics, "j-1", lambda: None).sample_quietly() is True
    assert "nvidia-smi exited 9: NVIDIA-SMI has failed" in caplog.text
    assert metrics.calls == []


def test_without_an_instance_id_only_the_job_dimension_is_published(two_gpus):
    # Given a monitor off EC2
    metrics = RecordingMetrics()

    # When it samples
    GpuMonitor(metrics, "j-1", lambda: None).sample()

    # Then each metric is published once, per job
    [(namespace, data)] = metrics.calls
    assert namespace == "spotrun"
    assert [(d["MetricName"], d["Dimensions"], d["Unit"]) for d in data] == [
        ("GPUUtilization", [{"Name": "JobId", "Value": "j-1"}], "Percent"),
        ("GPUMemoryUtilization", [{"Name": "JobId", "Value": "j-1"}], "Percent"),
    ]


def test_each_summary_is_also_told_to_the_hang_watch_even_when_publishing_fails(two_gpus):
    # Given a monitor whose metrics port fails, telling its summaries to a listener (the hang watch)
    told: list[float] = []
    monitor = GpuMonitor(
        RecordingMetrics(ConnectionError("no route")),
        "j-1",
        lambda: None,
        on_summary=lambda summary: told.append(summary.utilization),
    )

    # When it samples
    monitor.sample_quietly()

    # Then the listener got the mean utilization
    assert told == [60.0]


def reading(index: int, utilization: float, used: float, total: float) -> GpuReading:
    return GpuReading(index=index, utilization=utilization, memory_used_mib=used, memory_total_mib=total)


def test_nvidia_smi_lines_that_are_not_numbers_are_skipped():
    # Given a GPU that cannot report its utilization, one without a total, a blank line, and two good ones
    text = "0, [N/A], 100, 1000\n\n1, 10, 500, 1000\n2, 30, 0, 0\n 3 , 30 , 0 , 1000 \n"

    # When / Then
    readings = parse_nvidia_smi(text)
    assert readings == [reading(1, 10.0, 500.0, 1000.0), reading(3, 30.0, 0.0, 1000.0)]
    summary = summarize(readings)
    assert summary is not None
    assert (summary.utilization, summary.memory_utilization, summary.gpus) == (20.0, 50.0, 2)
    assert summarize([]) is None


def test_dmon_rows_are_read_by_the_header_names_and_converted_from_mb_to_mib_per_second():
    # Given dmon's output with its two header lines, a GPU that does not measure PCIe, and columns reordered
    text = "# gpu  txpci  rxpci\n# Idx   MB/s   MB/s\n    0   1000   2000\n    1      -      -\n  junk line\n"

    # When
    found = parse_dmon(text)

    # Then rx and tx are taken by name, MB/s (10^6 B/s) in MiB/s (2^20 B/s), "-" as no figure
    assert found == {0: (round(2000 * MB_PER_MIB, 3), round(1000 * MB_PER_MIB, 3)), 1: (None, None)}
    assert found[0][0] == pytest.approx(1907.349, abs=0.001)
    # and rows before any header are not guessed at
    assert parse_dmon("    0   1000   2000\n") == {}


def test_a_sample_carries_every_gpu_with_its_pcie_throughput_to_each_listener(two_gpus):
    # Given a monitor with two listeners, the first of which fails
    got: list[GpuLine] = []

    def broken(line: GpuLine) -> None:
        raise RuntimeError("listener down")

    monitor = GpuMonitor(None, "j-1", lambda: None, on_sample=[broken, got.append])

    # When it samples
    assert monitor.sample_quietly() is True

    # Then the working listener got one line with both GPUs, by index, with dmon's figures converted
    [line] = got
    assert monitor.latest == line
    assert [(g.index, g.utilization, g.memory_used_mib, g.memory_total_mib) for g in line.gpus] == [
        (0, 40.0, 2048.0, 16384.0),
        (1, 80.0, 12288.0, 16384.0),
    ]
    assert (line.gpus[0].pcie_rx_mib_s, line.gpus[0].pcie_tx_mib_s) == (
        round(100 * MB_PER_MIB, 3),
        round(200 * MB_PER_MIB, 3),
    )
    assert (line.gpus[1].pcie_rx_mib_s, line.gpus[1].pcie_tx_mib_s) == (None, None)


def test_a_failing_dmon_leaves_the_sample_without_pcie_figures(tmp_path, monkeypatch):
    # Given an nvidia-smi whose query works and whose dmon fails
    script = fake_nvidia_smi(
        tmp_path / "bin",
        f'case "$*" in\n  {QUERY_CASE}) echo "0, 5, 100, 1000";;\n  *) echo "no dmon" >&2; exit 3;;\nesac',
    )
    monkeypatch.setenv("PATH", str(script.parent))

    # When / Then the reading is there, without PCIe throughput
    assert read_nvidia_smi() == [reading(0, 5.0, 100.0, 1000.0)]


def test_the_sampling_interval_is_a_minute_at_the_production_poll_and_scales_with_it():
    # Given / When / Then
    assert metrics_interval(5.0) == 60.0
    assert metrics_interval(0.1) == pytest.approx(1.2)

"""The train step's telemetry and idle watch end to end: a script reporting metrics through spotrun.training, a
fake nvidia-smi on PATH answering the query and dmon in their real shapes, parts in S3 (moto), heartbeats."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from spotrun.agent.reporter import RecordingReporter
from spotrun.agent.step_runner import EXIT_REPORTED, execute
from spotrun.model import layout
from spotrun.model.agent_protocol.command import TRAINING_IDLE, GpuIdleWatch
from spotrun.model.job.gpu_health import read_idle_cause
from spotrun.model.job.telemetry import assemble
from tests.integration.test_agent import BUCKET, command, context, failure_of, manifest, success_of

JOB = "j-000000000001"


def gpus_on_path(directory: Path, monkeypatch: Any, utilization: int) -> None:
    """An ``nvidia-smi`` with two GPUs at ``utilization`` %: the query's CSV, and dmon's two ``#`` lines first."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        "  *--query-gpu=index,utilization.gpu,memory.used,memory.total*--format=csv,noheader,nounits*)\n"
        f'    printf "0, {utilization}, 2048, 16384\\n1, {utilization}, 15000, 16384\\n";;\n'
        '  "dmon --select t --count 1")\n'
        '    printf "# gpu  rxpci  txpci\\n# Idx   MB/s   MB/s\\n    0   1000     50\\n    1      -      -\\n";;\n'
        "  *) exit 9;;\n"
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")


def script_document(script: str) -> dict[str, Any]:
    document = manifest(command=[sys.executable, "-c", script])
    del document["training"]["code"]
    document["data"]["inputs"] = []
    document["outputs"] = {"model": "model.bin"}
    return document


def stored_telemetry(s3: Any) -> list[tuple[int, int, str]]:
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=layout.telemetry_prefix(JOB)).get("Contents", [])
    found = []
    for item in listed:
        parsed = layout.parse_telemetry_key(item["Key"])
        assert parsed is not None, item["Key"]
        body = s3.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read().decode()
        found.append((parsed[0], parsed[1], body))
    return found


REPORTING = (
    "import time\n"
    "from spotrun import training\n"
    "run = training.Run.from_env()\n"
    "for step in range(1, 21):\n"
    "    run.report_metrics(step, loss=1.0 / step, accuracy=step / 20)\n"
    "    run.checkpoint_due(step)\n"
    "    time.sleep(0.05)\n"
    "run.save_model(lambda path: path.write_bytes(b'model'))\n"
)


def test_the_scripts_metrics_and_the_gpu_samples_reach_the_jobs_telemetry_and_the_heartbeat(
    s3, tmp_path, monkeypatch
):
    # Given two busy GPUs, a script reporting loss and accuracy at 20 steps, and an idle watch it never trips
    gpus_on_path(tmp_path / "bin", monkeypatch, utilization=93)
    ctx = context(s3, tmp_path / "nvme")
    train = command(
        "train",
        script_document(REPORTING),
        telemetry_seconds=0.3,
        gpu_idle=GpuIdleWatch(utilization_below=10, seconds=0.4),
    )

    # When it trains to its end
    status = execute(train, ctx)

    # Then it succeeded, and the parts of attempt 1, node 0 hold every report and GPU samples
    assert status == EXIT_REPORTED
    success_of(ctx)
    parts = stored_telemetry(s3)
    assert parts
    assert {(attempt, node) for attempt, node, _ in parts} == {(1, 0)}
    series = assemble(parts)
    assert series.skipped_lines == 0
    assert [(p.step, p.value) for p in series.metrics["loss"]] == [(n, 1.0 / n) for n in range(1, 21)]
    assert [p.value for p in series.metrics["accuracy"]][-1] == 1.0
    assert {(p.gpu, p.utilization) for p in series.gpu} == {(0, 93.0), (1, 93.0)}
    # with each GPU's memory and PCIe throughput (dmon's MB/s in MiB/s; "-" as none)
    first, second = series.gpu[0], series.gpu[1]
    assert second.memory_percent > 90
    assert first.pcie_rx_mib_s == round(1000 * 1_000_000 / 2**20, 3)
    assert second.pcie_rx_mib_s is None
    # and a heartbeat carried the node's latest sample
    reporter = ctx.reporter
    assert isinstance(reporter, RecordingReporter)
    assert reporter.gpu is not None
    assert [g.utilization for g in reporter.gpu.gpus] == [93.0, 93.0]


IDLING = (
    "import time\n"
    "from spotrun import training\n"
    "run = training.Run.from_env()\n"
    "step = 0\n"
    "while True:\n"
    "    step += 1\n"
    "    run.report_metrics(step, loss=0.5)\n"
    "    run.checkpoint_due(step)\n"
    "    if run.stop_requested:\n"
    "        run.save_checkpoint(step, lambda d: (d / 'state').write_text(str(step)))\n"
    "        run.exit_for_preemption()\n"
    "    time.sleep(0.05)\n"
)


def test_gpus_idle_for_the_watchs_time_stop_the_command_and_report_training_idle(s3, tmp_path, monkeypatch):
    # Given GPUs that read 0 % and an idle watch of 0.6 s below 10 %
    gpus_on_path(tmp_path / "bin", monkeypatch, utilization=0)
    ctx = context(s3, tmp_path / "nvme")
    train = command(
        "train",
        script_document(IDLING),
        telemetry_seconds=0.3,
        gpu_idle=GpuIdleWatch(utilization_below=10, seconds=0.6),
    )

    # When it runs
    status = execute(train, ctx)

    # Then the command got the checkpoint signal, its checkpoint was committed, and Training.Idle was reported
    assert status == EXIT_REPORTED
    error, failure = failure_of(ctx)
    assert error == TRAINING_IDLE
    assert failure.checkpoint_step is not None
    assert failure.message.startswith("every GPU (2) read below 10 % utilization for")
    assert "checkpoint step" in failure.message
    # with the node, the seconds and the highest reading, as the control plane reads them
    reporter = ctx.reporter
    assert isinstance(reporter, RecordingReporter)
    assert reporter.failure_cause is not None
    cause = read_idle_cause(json.dumps(reporter.failure_cause))
    assert cause.node == 0
    assert cause.seconds is not None
    assert cause.seconds >= 0.6
    assert cause.utilization_max == 0.0
    # and the last part went up: the reports up to the stop are in the telemetry
    series = assemble(stored_telemetry(s3))
    steps = [p.step for p in series.metrics["loss"]]
    assert steps
    assert steps[-1] is not None
    assert steps[-1] >= failure.checkpoint_step

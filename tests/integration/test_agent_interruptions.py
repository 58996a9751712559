"""Interruptions end to end in the agent: progress, notices through SSM, GPU metrics, partial checkpoints."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from spotrun.agent import checkpoint_store
from spotrun.agent.imds import ImdsClient
from spotrun.agent.step_runner import EXIT_REPORTED, execute, forward_notice
from spotrun.agent.supervision.gpu import CloudWatchMetrics
from spotrun.agent.supervision.notice_relay import NOTICE_SIGNAL, NOTICE_SOURCE
from spotrun.agent.supervision.spot_notices import ImdsNotices, NoticeWatcher
from spotrun.model import layout
from spotrun.model.agent_protocol.command import FailureCause
from tests.integration.test_agent import (
    BUCKET,
    EXAMPLE,
    REGION,
    command,
    context,
    failure_of,
    manifest,
    object_bytes,
    success_of,
    upload_example,
    write_checkpoint,
)

SLOW = ["--step-seconds", "0.01"]


@pytest.fixture
def staged(s3, tmp_path_factory) -> Callable[[Path], None]:
    """Uploads the tiny-regression example; the function stages it onto an NVMe root (the real stage step)."""
    data = tmp_path_factory.mktemp("data")
    subprocess.run([sys.executable, str(EXAMPLE / "generate_data.py"), str(data)], check=True)
    upload_example(s3, data)

    def stage(nvme_root: Path) -> None:
        ctx = context(s3, nvme_root)
        assert execute(command("stage", manifest()), ctx) == EXIT_REPORTED
        success_of(ctx)

    return stage


@pytest.fixture(autouse=True)
def keep_the_notice_signal_handler() -> Iterator[None]:
    previous = signal.getsignal(NOTICE_SIGNAL)
    yield
    signal.signal(NOTICE_SIGNAL, previous)


def after_first_checkpoint(nvme_root: Path, action: Callable[[], object]) -> None:
    """Run ``action`` in a thread once training wrote its first local checkpoint."""
    directory = layout.NvmeLayout(nvme_root, "j-000000000001").checkpoint_dir

    def wait_then_act() -> None:
        deadline = time.monotonic() + 20
        while not layout.local_checkpoints(directory) and time.monotonic() < deadline:
            time.sleep(0.01)
        action()

    threading.Thread(target=wait_then_act, daemon=True).start()


def progress_in_s3(s3: Any, attempt: int = 1) -> dict[str, Any]:
    return json.loads(object_bytes(s3, layout.progress_key("j-000000000001", attempt)))


def signal_notes(nvme_root: Path) -> list[str]:
    log = layout.NvmeLayout(nvme_root, "j-000000000001").log_file(1).read_text()
    return [line for line in log.splitlines() if "sending SIGTERM" in line]


def test_a_notice_through_ssm_checkpoints_and_reports_the_step_reached(s3, tmp_path, staged):
    # Given the example training on this instance, and a notice command sent once it checkpointed
    nvme = tmp_path / "nvme"
    staged(nvme)
    ctx = context(s3, nvme)
    statuses: list[int] = []
    after_first_checkpoint(nvme, lambda: statuses.append(forward_notice(command("notice", manifest()), nvme)))

    # When the train step runs
    status = execute(command("train", manifest(command=[sys.executable, "train.py", *SLOW])), ctx)

    # Then the notice was handed on, and the step reported Spot.Interrupted with the committed checkpoint
    error, cause = failure_of(ctx)
    assert (status, statuses) == (EXIT_REPORTED, [EXIT_REPORTED])
    assert error == "Spot.Interrupted"
    assert NOTICE_SOURCE in cause.message
    assert cause.checkpoint_step is not None
    assert 50 <= cause.checkpoint_step < 300
    assert cause.checkpoint == layout.checkpoint_prefix("j-000000000001", cause.checkpoint_step)
    latest = checkpoint_store.latest_committed(s3, BUCKET, "j-000000000001")
    assert latest is not None
    assert latest.step == cause.checkpoint_step
    # and the step reached, which the checkpoint taken on the signal holds, in the cause and in S3
    assert cause.last_step == cause.checkpoint_step
    assert progress_in_s3(s3)["step"] == cause.last_step
    assert progress_in_s3(s3)["updated_at"].endswith("Z")
    # and the pid file is gone with the step
    assert not layout.NvmeLayout(nvme, "j-000000000001").supervisor_pid_file(1).exists()
    assert len(signal_notes(nvme)) == 1


def test_a_notice_through_ssm_after_the_imds_one_starts_no_second_interruption(s3, tmp_path, staged, imds):
    # Given training whose IMDS announces an interruption after the first checkpoint
    nvme = tmp_path / "nvme"
    staged(nvme)
    watcher = NoticeWatcher(ImdsNotices(ImdsClient(imds.endpoint)), 0.05)
    ctx = context(s3, nvme, watcher)
    statuses: list[int] = []

    def imds_then_ssm() -> None:
        imds.set_instance_action(seconds_from_now=10)
        deadline = time.monotonic() + 10
        while watcher.interruption() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        statuses.append(forward_notice(command("notice", manifest()), nvme))

    after_first_checkpoint(nvme, imds_then_ssm)

    # When the train step runs
    execute(command("train", manifest(command=[sys.executable, "train.py", *SLOW])), ctx)

    # Then one interruption, the IMDS one, was handled: one checkpoint signal, one report
    error, cause = failure_of(ctx)
    assert statuses == [EXIT_REPORTED]
    assert error == "Spot.Interrupted"
    assert "(imds)" in cause.message
    assert NOTICE_SOURCE not in cause.message
    assert len(signal_notes(nvme)) == 1
    assert cause.checkpoint_step is not None
    assert cause.last_step == cause.checkpoint_step


def test_a_finished_run_reports_its_last_step_and_publishes_gpu_and_training_metrics(
    s3, tmp_path, staged, monkeypatch
):
    # Given an instance with two GPUs (a fake nvidia-smi) and CloudWatch
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\ncase "$1" in\n  --query-gpu=*) printf "0, 40, 2048, 16384\\n1, 80, 12288, 16384\\n";;\n'
        '  dmon) printf "# gpu rxpci txpci\\n# Idx MB/s MB/s\\n 0 10 20\\n 1 30 40\\n";;\n  *) exit 9;;\nesac\n'
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cloudwatch = boto3.client("cloudwatch", region_name=REGION)
    nvme = tmp_path / "nvme"
    staged(nvme)
    ctx = context(s3, nvme)
    ctx.metrics = CloudWatchMetrics(cloudwatch)
    ctx.instance_id = lambda: "i-0123456789abcdef0"

    # When the example trains to the end
    status = execute(command("train", manifest()), ctx)

    # Then it reports its last step, which S3 holds too
    result = success_of(ctx)
    assert status == EXIT_REPORTED
    assert result["last_step"] == 300
    assert progress_in_s3(s3)["step"] == 300
    # and GPU metrics went to CloudWatch per instance and per job, the example's training metrics per job
    listed = cloudwatch.list_metrics(Namespace="spotrun")["Metrics"]
    assert {(m["MetricName"], m["Dimensions"][0]["Value"]) for m in listed} == {
        ("GPUUtilization", "i-0123456789abcdef0"),
        ("GPUUtilization", "j-000000000001"),
        ("GPUMemoryUtilization", "i-0123456789abcdef0"),
        ("GPUMemoryUtilization", "j-000000000001"),
        ("loss", "j-000000000001"),
        ("full_data_loss", "j-000000000001"),
    }


def test_a_failed_run_reports_the_last_step_it_reached(s3, tmp_path):
    # Given a script that reports steps 1 to 7 through spotrun.training, then fails
    script = (
        "from spotrun import training\n"
        "run = training.Run.from_env()\n"
        "for step in range(1, 8):\n"
        "    run.checkpoint_due(step)\n"
        "run.flush_progress()\n"
        "raise SystemExit(3)\n"
    )
    document = manifest(command=[sys.executable, "-c", script])
    del document["training"]["code"]
    document["data"]["inputs"] = []
    ctx = context(s3, tmp_path / "nvme")

    # When
    execute(command("train", document), ctx)

    # Then
    error, cause = failure_of(ctx)
    assert error == "Training.Failed"
    assert cause.exit_code == 3
    assert cause.last_step == 7
    assert progress_in_s3(s3)["step"] == 7


def test_a_checkpoint_cut_before_its_commit_marker_is_never_restored_by_staging(s3, tmp_path, staged):
    # Given step 50 committed, and step 100 whose every file went up but the instance died before the marker
    checkpoint_store.upload_checkpoint(
        s3, BUCKET, "j-000000000001", 50, write_checkpoint(tmp_path / "a", 50, b"fifty")
    )

    class DiesBeforeTheMarker:
        def __getattr__(self, name: str) -> Any:
            return getattr(s3, name)

        def put_object(self, **kwargs: Any) -> Any:
            if kwargs["Key"].endswith(layout.COMMIT_MARKER):
                raise ConnectionError("instance terminated")
            return s3.put_object(**kwargs)

    with pytest.raises(ConnectionError):
        checkpoint_store.upload_checkpoint(
            DiesBeforeTheMarker(),
            BUCKET,
            "j-000000000001",
            100,
            write_checkpoint(tmp_path / "b", 100, b"hundred"),
        )
    assert (
        s3.list_objects_v2(Bucket=BUCKET, Prefix=layout.checkpoint_prefix("j-000000000001", 100))["KeyCount"]
        == 2
    )

    # When the next attempt is staged on a fresh instance
    nvme = tmp_path / "nvme"
    ctx = context(s3, nvme)
    execute(command("stage", manifest(), attempt=2), ctx)

    # Then step 50 was restored, and nothing of step 100
    result = success_of(ctx)
    assert result["restored_step"] == 50
    local = layout.local_checkpoints(layout.NvmeLayout(nvme, "j-000000000001").checkpoint_dir)
    assert [step for step, _ in local] == [50]
    assert (local[0][1] / "weights.bin").read_bytes() == b"fifty"


def test_failure_cause_and_train_result_carry_last_step_as_optional():
    # Given a cause from an agent that predates last_step / When / Then it still parses
    assert FailureCause.model_validate({"message": "m"}).last_step is None
    assert FailureCause(message="m", last_step=12).model_dump()["last_step"] == 12

"""An ordinary PyTorch data pipeline through the agent: a shuffling DataLoader with two workers and dropout,
interrupted twice, loses no step and ends with the bytes of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotrun.agent.step_runner import EXIT_REPORTED, execute, forward_notice
from spotrun.agent.supervision.notice_relay import NOTICE_SIGNAL
from spotrun.model import layout
from tests.integration.test_agent import (
    BUCKET,
    REPO,
    command,
    context,
    failure_of,
    object_bytes,
    success_of,
)

SCRIPT = Path(__file__).with_name("torch_loader_script.py")
JOB = "j-000000000001"
MODEL_KEY = f"jobs/{JOB}/output/model.safetensors"


@pytest.fixture(autouse=True)
def keep_the_notice_signal_handler() -> Iterator[None]:
    previous = signal.getsignal(NOTICE_SIGNAL)
    yield
    signal.signal(NOTICE_SIGNAL, previous)


def document() -> dict:
    return {
        "name": "torch-loader",
        "training": {
            "code": f"s3://{BUCKET}/loader/code/",
            "command": [sys.executable, SCRIPT.name, "--step-seconds", "0.03"],
            "checkpoint": {"interval_steps": 10, "keep_last": 2},
        },
        "outputs": {"model": "model.safetensors"},
    }


def direct_model(workdir: Path) -> bytes:
    """The model the script writes run directly, uninterrupted (no SPOTRUN_ variable)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPOTRUN_")}
    env["PYTHONPATH"] = str(REPO)
    workdir.mkdir()
    subprocess.run([sys.executable, str(SCRIPT)], cwd=workdir, env=env, check=True, capture_output=True)
    return (workdir / "output" / "model.safetensors").read_bytes()


def notice_after_a_new_checkpoint(nvme: Path, attempt: int, restored: int) -> None:
    """Send the attempt a spot notice a few steps after its first checkpoint past ``restored``: mid-epoch."""
    directory = layout.NvmeLayout(nvme, JOB).checkpoint_dir

    def wait_then_notify() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if any(step > restored for step, _ in layout.local_checkpoints(directory)):
                break
            time.sleep(0.01)
        time.sleep(0.1)
        forward_notice(command("notice", document(), attempt=attempt), nvme)

    threading.Thread(target=wait_then_notify, daemon=True).start()


# Four processes import torch (the direct run, three attempts): 57 s measured alone, 204 s on a machine whose
# two cores ran eight other suites; pytest's 300 s would fail it on load rather than on a fault.
@pytest.mark.timeout(600)
def test_a_dataloader_with_workers_interrupted_twice_loses_no_step_and_ends_with_the_direct_runs_bytes(
    s3, tmp_path
):
    # Given the script's model run directly, and its code where staging finds it
    expected = direct_model(tmp_path / "direct")
    s3.put_object(Bucket=BUCKET, Key=f"loader/code/{SCRIPT.name}", Body=SCRIPT.read_bytes())

    # When it runs as a job whose first two attempts get a spot notice mid-epoch
    restored = 0
    causes = []
    for attempt in (1, 2, 3):
        nvme = tmp_path / f"nvme-{attempt}"
        stage = context(s3, nvme)
        execute(command("stage", document(), attempt=attempt), stage)
        assert (success_of(stage)["restored_step"] or 0) == restored
        if attempt < 3:
            notice_after_a_new_checkpoint(nvme, attempt, restored)
        train = context(s3, nvme)
        assert execute(command("train", document(), attempt=attempt), train) == EXIT_REPORTED
        if attempt < 3:
            error, cause = failure_of(train)
            assert error == "Spot.Interrupted", cause.message
            causes.append(cause)
            restored = cause.checkpoint_step or 0
        else:
            success_of(train)

    # Then each notice's checkpoint held the last step reached (the workers lived through the signal, the
    # save finished), no crash was reported, and each attempt resumed it
    for cause in causes:
        assert cause.checkpoint_step is not None
        assert cause.checkpoint_step == cause.last_step, cause.log_tail
        assert cause.save_failed is None
    assert 10 <= causes[0].checkpoint_step < causes[1].checkpoint_step < 64
    # and the model is the uninterrupted run's, byte for byte
    assert object_bytes(s3, MODEL_KEY) == expected


def test_a_checkpoint_signal_sent_to_the_whole_group_leaves_the_workers_alive_for_the_save(tmp_path):
    # Given the script run directly in a session of its own, as torchrun starts a rank
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPOTRUN_")}
    env["PYTHONPATH"] = str(REPO)
    child = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--step-seconds", "0.03"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert child.stdout is not None
    lines = []
    for line in child.stdout:
        lines.append(line)
        if line.startswith("step 20 "):  # into the second epoch: its workers started after the first's ended
            break

    # When the checkpoint signal goes to its whole process group, as torchrun's os.killpg sends it
    os.killpg(child.pid, signal.SIGTERM)
    output = "".join(lines) + child.stdout.read()
    status = child.wait(timeout=120)

    # Then it saved the step it reached and exited as preempted: its DataLoader workers lived through the signal
    assert status == 128 + signal.SIGTERM, output
    last = int([line for line in output.splitlines() if line.startswith("step ")][-1].split()[1])
    assert layout.local_checkpoints(tmp_path / "checkpoints")[-1][0] == last

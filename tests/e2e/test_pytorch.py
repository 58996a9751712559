"""The PyTorch example in the emulator: interrupted twice, alone and under torchrun, it ends with the model a
direct run of the same script writes, byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spotrun.model.job.record import JobStatus
from spotrun.shape import REPO_ROOT
from tests.e2e.conftest import (
    PYTORCH_CODE_PREFIX,
    PYTORCH_EXAMPLE,
    assert_nothing_left_running,
    read_archived,
    run_with_chaos,
    sha256,
)

STEP_SECONDS = "0.02"
# One process: 48 batches an epoch, 144 steps, a checkpoint every 20. The first interruption is decided in
# the first epoch (its stop lands a few steps later, mid-epoch), the second at a checkpoint's step (the stop
# comes right after that checkpoint).
ALONE_STEPS = [30, 60]
# Four processes (the instance's four GPUs): 12 batches of 4 x 32 an epoch, 6 epochs, 72 steps.
DDP_EPOCHS = "6"
DDP_STEPS = [15, 40]


def direct_model(workdir: Path, launcher: list[str], *args: str) -> bytes:
    """The model the example writes when run directly (no SPOTRUN_ variable), in a fresh directory."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPOTRUN_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    subprocess.run(
        [*launcher, str(PYTORCH_EXAMPLE / "train.py"), *args],
        cwd=workdir,
        env=env,
        check=True,
        capture_output=True,
    )
    return (workdir / "output" / "model.safetensors").read_bytes()


def manifest(name: str, resources: str, command: str) -> bytes:
    """The example's manifest with its code in S3 (until `--workdir` uploads it), for these resources."""
    text = (PYTORCH_EXAMPLE / "manifest.yaml").read_text()
    replacements = {
        "name: pytorch-digits": f"name: {name}",
        "  gpu_names: [t4, a10g, l4]": resources,
        "  workdir: .": f"  code: s3://spotrun-jobs-local/{PYTORCH_CODE_PREFIX}",
        '  command: [torchrun, --nproc-per-node, "${SPOTRUN_GPUS_PER_NODE}", train.py, --max-steps, "144"]': command,
    }
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    return text.encode()


def model_bytes(runtime, job) -> bytes:
    [model] = [item for item in job.archive if item.uri.endswith("/model.safetensors")]
    return read_archived(runtime, model.uri)


def assert_resumed_twice(runtime, job, expected: bytes) -> None:
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert model_bytes(runtime, job) == expected
    assert job.model_sha256 == sha256(expected)
    assert [attempt.end_reason for attempt in job.attempts] == ["interrupted", "interrupted", "completed"]
    for interrupted, resumed in zip(job.attempts, job.attempts[1:], strict=False):
        # The checkpoint signal's save: at most the step being reported was lost, and the next attempt resumed it
        assert interrupted.notice_at is not None
        assert interrupted.steps_lost is not None
        assert interrupted.steps_lost <= 1
        assert resumed.restored_step is not None
        assert resumed.restored_step >= interrupted.last_step - 1
    assert_nothing_left_running(runtime, job)


def test_the_pytorch_example_interrupted_twice_ends_with_the_direct_runs_model(torch_runtime, tmp_path):
    # Given the model of the example run directly, one process
    expected = direct_model(tmp_path, [sys.executable])
    job_manifest = manifest(
        "pytorch-alone",
        "  gpu_names: [t4, a10g, l4]",
        f"  command: [python, train.py, --step-seconds, {STEP_SECONDS!r}]",
    )

    # When it runs as a job, interrupted mid-epoch and then at a checkpoint's step
    job = run_with_chaos(
        torch_runtime, job_manifest, "pytorch-alone.yaml", ALONE_STEPS, torch_runtime.interrupt
    )

    # Then it succeeds with the same model bytes, each attempt resuming where the one before saved
    assert_resumed_twice(torch_runtime, job, expected)


def test_under_torchrun_every_rank_stops_at_the_same_step_and_the_model_matches(torch_runtime, tmp_path):
    # Given a four-GPU instance type, and the model torchrun with four processes writes directly
    torchrun = str(Path(sys.executable).parent / "torchrun")
    expected = direct_model(tmp_path, [torchrun, "--nproc-per-node", "4"], "--epochs", DDP_EPOCHS)
    # ...with the example's own command: torchrun gets the GPU count from ${SPOTRUN_GPUS_PER_NODE}
    job_manifest = manifest(
        "pytorch-ddp",
        "  instance_types: [g4dn.12xlarge]\n  gpus_per_node: 4",
        '  command: [torchrun, --nproc-per-node, "${SPOTRUN_GPUS_PER_NODE}", train.py, '
        f"--epochs, {DDP_EPOCHS!r}, --step-seconds, {STEP_SECONDS!r}]",
    )

    # When it runs as a job interrupted twice (the agent signals torchrun, which forwards it to the ranks)
    job = run_with_chaos(torch_runtime, job_manifest, "pytorch-ddp.yaml", DDP_STEPS, torch_runtime.interrupt)

    # Then all ranks saved the same step each time, and the model is the direct run's, byte for byte
    assert_resumed_twice(torch_runtime, job, expected)

"""The hf-tiny-classifier example in the emulator: a Trainer job interrupted once ends as if it never was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotrun.local.demo import local_runtime
from spotrun.local.runtime import LocalRuntime
from spotrun.model import layout
from spotrun.model.job.record import JobStatus
from spotrun.shape import REPO_ROOT
from tests.e2e.conftest import E2E_TIME_SCALE, assert_nothing_left_running, read_archived, run_with_chaos

EXAMPLE = REPO_ROOT / "examples" / "hf-tiny-classifier"
CODE_PREFIX = "examples/hf-tiny-classifier/code/"
STEP_SECONDS = "0.1"  # 48 steps: about 5 s of training, so that the warning lands mid-run
INTERRUPT_AT = 14  # mid-epoch (24 steps each), between the checkpoints of steps 10 and 20


@pytest.fixture(scope="module")
def runtime(tmp_path_factory) -> Iterator[LocalRuntime]:
    """An emulator with the example's code uploaded where its manifest will point (no data: it makes its own)."""
    with local_runtime(tmp_path_factory.mktemp("runtime"), time_scale=E2E_TIME_SCALE) as started:
        s3 = started.client("s3")
        for path in sorted(p for p in EXAMPLE.iterdir() if p.is_file()):  # requirements.txt too
            s3.put_object(
                Bucket=started.settings.jobs_bucket,
                Key=f"{CODE_PREFIX}{path.name}",
                Body=path.read_bytes(),
                ChecksumAlgorithm="SHA256",
            )
        yield started


@pytest.fixture(scope="module")
def direct_run(tmp_path_factory) -> Path:
    """The example run directly, as its README says, without spotrun: its output directory."""
    workdir = tmp_path_factory.mktemp("direct")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPOTRUN_")}
    env.update({"PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"})
    subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py")], cwd=workdir, env=env, check=True, capture_output=True
    )
    return workdir / "output"


def manifest(runtime: LocalRuntime) -> bytes:
    """The example's manifest with its code in the jobs bucket (the test uploads it, as `--workdir` would)."""
    text = (EXAMPLE / "manifest.yaml").read_text()
    code = f"code: s3://{runtime.settings.jobs_bucket}/{CODE_PREFIX}"
    for old, new in (("workdir: .", code), ('--step-seconds, "0.05"', f'--step-seconds, "{STEP_SECONDS}"')):
        assert old in text, old
        text = text.replace(old, new)
    return text.encode()


def test_a_trainer_job_interrupted_once_resumes_at_its_step_and_evaluates_like_the_direct_run(
    runtime, direct_run
):
    # Given the Hugging Face example job, whose instance gets a spot interruption warning at step 14
    # When it runs in the emulator
    job = run_with_chaos(
        runtime, manifest(runtime), "hf-tiny-classifier.yaml", [INTERRUPT_AT], runtime.interrupt
    )

    # Then it succeeded in two attempts, the second resuming at the global step the first saved on the signal
    assert job.status is JobStatus.SUCCEEDED, job.error
    first, second = job.attempts
    assert first.end_reason == "interrupted"
    assert first.steps_lost is not None
    assert first.steps_lost <= 1
    assert second.restored_step == first.last_step - first.steps_lost
    assert second.checkpoint_restored.endswith(f"{layout.checkpoint_name(second.restored_step)}/")
    s3 = runtime.client("s3")
    logs = [
        s3.get_object(Bucket=runtime.settings.jobs_bucket, Key=layout.log_key(job.job_id, attempt.number))[
            "Body"
        ]
        .read()
        .decode()
        for attempt in job.attempts
    ]
    assert f"checkpoint signal: saved step {second.restored_step}, exiting" in logs[0]
    assert f"resumed at global step {second.restored_step}" in logs[1]  # Trainer's state, from the checkpoint
    # And its final evaluation and weights equal the uninterrupted direct run's, so the optimizer, the scheduler
    # and the data order continued exactly
    key = f"{layout.output_prefix(job.job_id)}metrics.json"
    metrics = json.loads(s3.get_object(Bucket=runtime.settings.jobs_bucket, Key=key)["Body"].read())
    assert metrics == json.loads((direct_run / "metrics.json").read_text())
    [weights] = [item for item in job.archive if item.uri.endswith("/model.safetensors")]
    assert read_archived(runtime, weights.uri) == (direct_run / "model" / "model.safetensors").read_bytes()
    assert_nothing_left_running(runtime, job)

"""The hf-tiny-classifier example in the emulator: a Trainer job interrupted once ends as if it never was, on one
node and as a torchrun group of two nodes whose reclaimed node is replaced alone."""

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
from spotrun.model.job.attempt import END_KEPT
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


def manifest(runtime: LocalRuntime, name: str = "manifest.yaml") -> bytes:
    """One of the example's manifests with its code in the jobs bucket (the test uploads it, as `--workdir` would)."""
    text = (EXAMPLE / name).read_text()
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
    assert first.last_step is not None
    assert second.restored_step is not None
    assert second.checkpoint_restored is not None
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


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory) -> Path:
    """The example run directly under torchrun with 2 processes on one node, without spotrun: its output."""
    workdir = tmp_path_factory.mktemp("two-processes")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPOTRUN_")}
    env.update({"PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "GLOO_SOCKET_IFNAME": "lo"})
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    subprocess.run(
        [*torchrun, str(EXAMPLE / "train.py"), "--max-steps", "48"],
        cwd=workdir,
        env=env,
        check=True,
        capture_output=True,
    )
    return workdir / "output"


def test_a_two_node_trainer_job_whose_node_is_reclaimed_ends_with_the_bytes_of_two_processes(
    runtime, two_process_run
):
    # Given the example's 2-node job (torchrun, one rank a node), whose node 0 gets a spot warning at step 14
    # When it runs in the emulator
    job = run_with_chaos(
        runtime, manifest(runtime, "multinode.yaml"), "hf-2-nodes.yaml", [INTERRUPT_AT], runtime.interrupt
    )

    # Then it succeeded; the first attempt ended interrupted with node 1 kept, and the next resumed the group's
    # checkpoint with the kept node and one new one
    assert job.status is JobStatus.SUCCEEDED, job.error
    first, second = job.attempts[0], job.attempts[1]
    assert first.end_reason == "interrupted"
    assert [node.end_reason for node in first.nodes].count(END_KEPT) == 1
    assert sorted(node.kept_from is None for node in second.nodes) == [False, True]
    assert second.restored_step is not None
    assert first.last_step is not None
    assert 10 <= second.restored_step <= first.last_step
    # And its evaluation and weights equal those of 2 processes run directly without interruption
    s3 = runtime.client("s3")
    key = f"{layout.output_prefix(job.job_id)}metrics.json"
    metrics = json.loads(s3.get_object(Bucket=runtime.settings.jobs_bucket, Key=key)["Body"].read())
    assert metrics == json.loads((two_process_run / "metrics.json").read_text())
    [weights] = [item for item in job.archive if item.uri.endswith("/model.safetensors")]
    assert (
        read_archived(runtime, weights.uri) == (two_process_run / "model" / "model.safetensors").read_bytes()
    )
    assert_nothing_left_running(runtime, job)

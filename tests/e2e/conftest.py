"""Whole workflows in the embedded runtime: the real state machine, handlers and agent, over a local emulator."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from spotrun.cli.client import ApiError, SpotrunClient
from spotrun.local.chaos.injector import Injector
from spotrun.local.chaos.plan import InterruptionSchedule
from spotrun.local.demo import (
    EXAMPLE_DIR,
    drop_manifest,
    job_progress,
    local_runtime,
    upload_example,
    wait_for_job,
)
from spotrun.local.runtime import LocalRuntime
from spotrun.model.job.record import Job
from spotrun.shape import REPO_ROOT

E2E_TIME_SCALE = 0.02
# The PyTorch example, and where its code is uploaded as `training.workdir: .` would upload it.
PYTORCH_EXAMPLE = REPO_ROOT / "examples" / "pytorch-digits"
PYTORCH_CODE_PREFIX = "examples/pytorch-digits/code/"


@pytest.fixture(scope="module")
def runtime(tmp_path_factory) -> Iterator[LocalRuntime]:
    """One emulator per test module (moto's state is process-wide), with the example's code and data uploaded."""
    with local_runtime(tmp_path_factory.mktemp("runtime"), time_scale=E2E_TIME_SCALE) as started:
        upload_example(started)
        yield started


@pytest.fixture(scope="module")
def torch_runtime(runtime):
    """The module's emulator, with the example's code uploaded as `training.workdir: .` would upload it."""
    s3 = runtime.client("s3")
    for path in sorted(p for p in PYTORCH_EXAMPLE.iterdir() if p.is_file()):  # requirements.txt too
        s3.put_object(
            Bucket=runtime.settings.jobs_bucket,
            Key=PYTORCH_CODE_PREFIX + path.name,
            Body=path.read_bytes(),
            ChecksumAlgorithm="SHA256",
        )
    return runtime


@pytest.fixture(scope="session")
def direct_model(tmp_path_factory) -> bytes:
    """The example's model, trained directly with the same data and arguments, without spotrun."""
    workdir = tmp_path_factory.mktemp("direct")
    subprocess.run([sys.executable, str(EXAMPLE_DIR / "generate_data.py"), str(workdir / "data")], check=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPOTRUN_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    subprocess.run(
        [sys.executable, str(EXAMPLE_DIR / "train.py"), "--data-dir", str(workdir / "data")],
        cwd=workdir,
        env=env,
        check=True,
        capture_output=True,
    )
    return (workdir / "output" / "model.npy").read_bytes()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def example_manifest(**replacements: str) -> bytes:
    """The example manifest, with text replaced (e.g. the training command) for a variant of the job."""
    text = (EXAMPLE_DIR / "manifest.yaml").read_text()
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    return text.encode()


def read_archived(runtime: LocalRuntime, uri: str) -> bytes:
    """Restore a Glacier object (instant in the emulator) and read it, as a user would."""
    bucket, key = uri.removeprefix("s3://").split("/", 1)
    s3 = runtime.client("s3")
    s3.restore_object(Bucket=bucket, Key=key, RestoreRequest={"Days": 1})
    return bytes(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def instance_state(runtime: LocalRuntime, instance_id: str) -> str:
    reservations = runtime.client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"]
    return str(reservations[0]["Instances"][0]["State"]["Name"])


def run_with_chaos(
    runtime: LocalRuntime,
    manifest: bytes,
    key_name: str,
    steps: list[int],
    strike: Callable[[str], object],
    timeout: float = 240.0,
) -> Job:
    """Drop a manifest and, each time the current attempt reaches the next of ``steps``, ``strike`` its instance."""
    submitted = drop_manifest(runtime, manifest, key_name)
    injector = Injector(InterruptionSchedule(steps), job_progress(runtime, submitted.job_id), strike)
    with injector:
        job = wait_for_job(runtime, submitted.job_id, timeout=timeout)
    assert not injector.schedule.pending, f"planned steps never reached: {injector.schedule.pending}"
    return job


def assert_nothing_left_running(runtime: LocalRuntime, job: Job) -> None:
    """Every instance the job ever had is gone (terminated or shutting down)."""
    running = set(runtime.running_instance_ids())
    assert not running & set(job.instance_ids()), running & set(job.instance_ids())
    for instance_id in job.instance_ids():
        assert instance_state(runtime, instance_id) in {"shutting-down", "terminated"}, instance_id


def wait_for_record(client: SpotrunClient, job_id: str, timeout: float = 60.0) -> None:
    """Until the dropped manifest's job exists (its S3 event is handled asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.get_job(job_id)
            return
        except ApiError:
            assert time.monotonic() < deadline, f"job {job_id} never appeared"
            time.sleep(0.2)

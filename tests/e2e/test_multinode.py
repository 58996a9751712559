"""A two-node PyTorch job in the emulator: two simulated instances whose agents run torchrun's c10d rendezvous
and gloo collectives over their own loopback addresses. A reclaimed node is replaced alone, the healthy one never
terminated; a silent death, a hung rank, a zone without a replacement and a cancel each end as they should, and
the model is the one two ranks write without interruption, byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spotrun.aws.adapters import job_store
from spotrun.control.ports import JobStore
from spotrun.local.demo import drop_manifest, wait_for_job
from spotrun.local.runtime import LocalRuntime
from spotrun.model.job.attempt import END_KEPT, Attempt
from spotrun.model.job.record import Job, JobStatus
from spotrun.shape import REPO_ROOT
from tests.e2e.conftest import (
    PYTORCH_CODE_PREFIX,
    PYTORCH_EXAMPLE,
    assert_nothing_left_running,
    instance_state,
    read_archived,
    run_with_chaos,
)
from tests.sigv4 import local_client

EPOCHS = "1"
STEP_SECONDS = "0.05"


@pytest.fixture(scope="module")
def two_rank_model(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The model torchrun writes with two ranks and no interruption, run directly (no SPOTRUN_ variable)."""
    workdir = tmp_path_factory.mktemp("two-ranks")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPOTRUN_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    torchrun = str(Path(sys.executable).parent / "torchrun")
    subprocess.run(
        [torchrun, "--nproc-per-node", "2", str(PYTORCH_EXAMPLE / "train.py"), "--epochs", EPOCHS],
        cwd=workdir,
        env=env,
        check=True,
        capture_output=True,
    )
    return (workdir / "output" / "model.safetensors").read_bytes()


def manifest(name: str, **extra: str) -> bytes:
    """The example's two-node manifest with its code in S3, a short run, and the emulator's bounds."""
    text = (PYTORCH_EXAMPLE / "multinode.yaml").read_text()
    replacements = {
        "name: pytorch-digits-2-nodes": f"name: {name}",
        "  workdir: .": f"  code: s3://spotrun-jobs-local/{PYTORCH_CODE_PREFIX}",
        'train.py, --epochs, "3"]': f'train.py, --epochs, "{EPOCHS}", --step-seconds, "{STEP_SECONDS}"]',
        "  replace_node_minutes: 10": f"  replace_node_minutes: {extra.get('replace', '10')}",
        "  hang_minutes: 10": f"  hang_minutes: {extra.get('hang', '10')}",
    }
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    return text.encode()


def store(runtime: LocalRuntime) -> JobStore:
    return job_store(runtime.settings.jobs_table, runtime.settings.region)


def group_on(runtime: LocalRuntime, instance_id: str) -> Attempt:
    """The open attempt of the job whose group runs a node on ``instance_id``."""
    owner = store(runtime).job_for_instance(instance_id)
    job = None if owner is None else store(runtime).get(owner)
    attempt = None if job is None else job.open_attempt
    assert attempt is not None, f"no group runs on {instance_id}"
    return attempt


def other_node(runtime: LocalRuntime, instance_id: str) -> str:
    """The other node of the two-node attempt that runs on ``instance_id``."""
    return next(i for i in group_on(runtime, instance_id).instance_ids() if i != instance_id)


def striking(actions: list[Callable[[str], object]]) -> Callable[[str], object]:
    """A strike that runs the next of ``actions`` on the node-0 instance id the injector gives it."""
    pending = list(actions)
    return lambda instance_id: pending.pop(0)(instance_id)


def assert_model(runtime: LocalRuntime, job: Job, expected: bytes) -> None:
    assert job.status is JobStatus.SUCCEEDED, job.error
    [model] = [item for item in job.archive if item.uri.endswith("/model.safetensors")]
    assert read_archived(runtime, model.uri) == expected
    assert_nothing_left_running(runtime, job)


def kept_across(job: Job) -> list[int]:
    """For each attempt after the first: how many of its nodes were kept, never terminated, from the one before."""
    counts = []
    for before, after in zip(job.attempts, job.attempts[1:], strict=False):
        carried = {n.instance_id for n in before.nodes if n.end_reason == END_KEPT}
        counts.append(len(carried & {n.instance_id for n in after.nodes if n.kept_from == before.number}))
    return counts


def test_a_reclaimed_node_and_a_silent_death_are_each_replaced_alone_and_the_model_matches(
    torch_runtime: LocalRuntime, two_rank_model: bytes
) -> None:
    # Given a two-node job, and a strike plan: a spot warning for node 0 (which hosts the rendezvous), then a
    # silent death of node 1 (its instance terminated without notice)
    runtime = torch_runtime
    strike = striking(
        [
            runtime.interrupt,
            lambda leader: runtime.kill(other_node(runtime, leader)),
        ],
    )
    # When it runs and is struck at steps 8 and 16 (of 24)
    job = run_with_chaos(runtime, manifest("ddp-replaced"), "ddp-replaced.yaml", [8, 16], strike)
    # Then it succeeded with the model two ranks write without interruption, and nothing is left running
    assert_model(runtime, job, two_rank_model)
    # And each loss ended an attempt whose healthy node was kept, never terminated, and joined by a new node
    assert [a.end_reason for a in job.attempts] == ["interrupted", "instance-lost", "completed"]
    assert kept_across(job) == [1, 1]
    for attempt in job.attempts[1:]:
        assert sum(1 for n in attempt.nodes if n.kept_from is None) == 1
    # And every attempt ran in the first one's zone (the replacement came from the group's pool)
    assert {a.availability_zone for a in job.attempts} == {job.attempts[0].availability_zone}


def test_a_hung_rank_restarts_the_group_on_the_same_nodes(
    torch_runtime: LocalRuntime, two_rank_model: bytes
) -> None:
    # Given a two-node job whose steps may stall for 15 s (hang_minutes 0.25: far above a step on a loaded machine)
    runtime = torch_runtime
    # When node 1's training processes are stopped (SIGSTOP: alive, silent) at step 8
    strike = striking([lambda leader: runtime.hang_training(other_node(runtime, leader))])
    job = run_with_chaos(runtime, manifest("ddp-hung", hang="0.25"), "ddp-hung.yaml", [8], strike)
    # Then the attempt ended hung, the group restarted on the same two instances, and the model matches
    assert_model(runtime, job, two_rank_model)
    assert [a.end_reason for a in job.attempts] == ["hung", "completed"]
    assert set(job.attempts[0].instance_ids()) == set(job.attempts[1].instance_ids())


def test_a_zone_without_a_replacement_moves_the_whole_group(
    torch_runtime: LocalRuntime, two_rank_model: bytes
) -> None:
    # Given a two-node job that waits 1.2 s for a replacement (replace_node_minutes 1, time-scaled)
    runtime = torch_runtime

    def exhaust_then_interrupt(leader: str) -> object:
        # The group's pool has no spot capacity left when node 1 is warned: no replacement there
        attempt = group_on(runtime, leader)
        runtime.capacity.exhaust(attempt.instance_type, attempt.availability_zone)
        return runtime.interrupt(other_node(runtime, leader))

    # When node 1 is reclaimed at step 8
    job = run_with_chaos(
        runtime,
        manifest("ddp-moved", replace="1"),
        "ddp-moved.yaml",
        [8],
        striking([exhaust_then_interrupt]),
    )
    # Then the group moved to another zone and still succeeded with the same model
    first, last = job.attempts[0], job.attempts[-1]
    runtime.capacity.refill(first.instance_type, first.availability_zone)
    assert_model(runtime, job, two_rank_model)
    assert last.availability_zone != first.availability_zone
    assert kept_across(job) == [0]
    # And the node kept while waiting was released and billed until the move
    assert any(u.end_reason == "group-moved" for u in job.unused_instances)


def test_a_cancelled_group_leaves_no_instance_running(torch_runtime: LocalRuntime) -> None:
    # Given a two-node job training
    runtime = torch_runtime
    submitted = drop_manifest(runtime, manifest("ddp-cancelled"), "ddp-cancelled.yaml")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        current = store(runtime).get(submitted.job_id)
        if current is not None and current.status is JobStatus.TRAINING:
            break
        time.sleep(0.5)
    else:
        raise AssertionError("the job never trained")
    # When it is cancelled through the API
    local_client(runtime.api_url or "").cancel(submitted.job_id)
    job = wait_for_job(runtime, submitted.job_id, timeout=60)
    # Then both nodes are gone
    assert job.status is JobStatus.CANCELLED
    assert len(job.instance_ids()) == 2
    assert_nothing_left_running(runtime, job)
    for instance_id in job.instance_ids():
        assert instance_state(runtime, instance_id) in {"shutting-down", "terminated"}

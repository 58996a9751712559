"""training.gpu_idle on a two-node job: the idle node is terminated and replaced, its peer kept, the group resumed.

Two simulated instances run the PyTorch example under torchrun. ``LocalRuntime.set_gpu`` makes node 1's GPU read
idle mid-training while its processes keep running: only its agent's idle watch can end the attempt.
"""

from __future__ import annotations

from spotrun.aws.adapters import job_store
from spotrun.local.runtime import LocalRuntime
from spotrun.model.job.attempt import END_IDLE, END_KEPT
from spotrun.model.job.record import JobStatus
from tests.e2e.conftest import (
    PYTORCH_CODE_PREFIX,
    PYTORCH_EXAMPLE,
    assert_nothing_left_running,
    instance_state,
    run_with_chaos,
)

IDLE_AT_STEP = 12  # of 48: one checkpoint committed (interval 10)


def node_1_of(runtime: LocalRuntime, leader: str) -> str:
    """The instance of node 1 of the open attempt whose node 0 runs on ``leader``."""
    store = job_store(runtime.settings.jobs_table, runtime.settings.region)
    owner = store.job_for_instance(leader)
    job = None if owner is None else store.get(owner)
    attempt = None if job is None else job.open_attempt
    assert attempt is not None, f"no group runs on {leader}"
    return next(node.instance_id for node in attempt.nodes if node.node == 1)


def group_manifest(name: str) -> bytes:
    """The example's two-node manifest with its code in S3, 48 steps of 0.3 s, and an idle policy of 3 s scaled."""
    text = (PYTORCH_EXAMPLE / "multinode.yaml").read_text()
    replacements = {
        "name: pytorch-digits-2-nodes": f"name: {name}",
        "  workdir: .": f"  code: s3://spotrun-jobs-local/{PYTORCH_CODE_PREFIX}",
        'train.py, --epochs, "3"]': 'train.py, --epochs, "2", --step-seconds, "0.3"]\n'
        "  gpu_idle: {minutes: 2.5, action: relaunch}",
    }
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    return text.encode()


def test_an_idle_node_is_terminated_and_replaced_while_its_peer_is_kept(torch_runtime: LocalRuntime) -> None:
    # Given a two-node job under gpu_idle action relaunch
    runtime = torch_runtime
    idled: list[str] = []

    def node_1_idles(leader: str) -> None:
        idle = node_1_of(runtime, leader)
        idled.append(idle)
        runtime.set_gpu(idle, utilization=0.0)

    # When node 1's GPU reads 0 % from step 12 on, its training still running
    job = run_with_chaos(runtime, group_manifest("ddp-idle"), "ddp-idle.yaml", [IDLE_AT_STEP], node_1_idles)

    # Then the job succeeded on a second attempt; the first ended idle, its idle node's end "idle", its peer kept
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert [a.end_reason for a in job.attempts] == [END_IDLE, "completed"]
    first, second = job.attempts
    ends = {node.instance_id: node.end_reason for node in first.nodes}
    [idle] = idled
    [peer] = [instance for instance in ends if instance != idle]
    assert ends == {idle: END_IDLE, peer: END_KEPT}
    # and the idle instance was terminated, the peer adopted by the next attempt beside one new node
    assert instance_state(runtime, idle) in {"shutting-down", "terminated"}
    assert peer in second.instance_ids()
    assert idle not in second.instance_ids()
    assert len(second.nodes) == 2
    # and the group resumed from a committed checkpoint
    assert second.restored_step is not None
    assert second.restored_step >= 10
    assert_nothing_left_running(runtime, job)

"""Two nodes' agents run one real torchrun group (c10d at 127.0.0.1, node 1 at 127.0.0.2, gloo over loopback): a
notice to both stops the group at one step, its checkpoint is committed once both parts are up, and the next
attempt, staged onto fresh disks, resumes it and ends with the model an uninterrupted group trains."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from spotrun.agent import checkpoint_store
from spotrun.agent.step_context import StepContext
from spotrun.agent.step_runner import EXIT_REPORTED, execute
from spotrun.agent.supervision.progress import read_progress
from spotrun.agent.supervision.spot_notices import Notice
from spotrun.model import layout
from spotrun.model.agent_protocol.command import SPOT_INTERRUPTED, NodeGroup
from tests.integration.conftest import AGENT_BUCKET as BUCKET
from tests.integration.test_agent import command, context, failure_of, success_of

ADDRESSES = ("127.0.0.1", "127.0.0.2")
TOTAL_STEPS = 24
TIMEOUT_S = 240

# Each rank trains a DDP model on its own random batches; TorchCheckpointer saves every 5 steps and at a stop.
TRAIN = f"""
import torch
import torch.distributed as dist
from torch import nn
from spotrun.training import pytorch

run = pytorch.run_from_env()
dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
checkpointer = pytorch.TorchCheckpointer(run, model, optimizer)
position = checkpointer.resume()
while position.step < {TOTAL_STEPS}:
    optimizer.zero_grad()
    model(torch.rand(16, 8)).pow(2).mean().backward()
    optimizer.step()
    position = position.advance(8)
    checkpointer.step_done(position)
    if run.progress_file is not None and position.step >= 6:
        import time; time.sleep(0.1)  # slow enough for the test's notice to land mid-run
if dist.get_rank() == 0:
    run.save_model(pytorch.save_safetensors(model))
dist.barrier()
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((ADDRESSES[0], 0))
        return int(probe.getsockname()[1])


def group_document() -> dict[str, Any]:
    return {
        "name": "pair",
        "resources": {"nodes": 2},
        "training": {
            "command": [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "train.py"],
            "checkpoint": {"interval_steps": 5, "keep_last": 2},
        },
        "outputs": {"model": "model.safetensors"},
    }


def node_contexts(s3: Any, root: Path, job_id: str) -> list[StepContext]:
    contexts = []
    for node in range(2):
        ctx = context(s3, root / f"nvme-{node}")
        ctx.base_env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
        ctx.local_ipv4 = lambda node=node: ADDRESSES[node]  # type: ignore[misc]
        code = layout.NvmeLayout(ctx.nvme_root, job_id).code_dir
        code.mkdir(parents=True, exist_ok=True)
        (code / "train.py").write_text(TRAIN)
        contexts.append(ctx)
    return contexts


def run_group(s3: Any, contexts: list[StepContext], step: str, job_id: str, attempt: int) -> None:
    """Run ``step`` on both nodes at once, each as its own agent would (node 1 in a thread)."""
    port = free_port()
    commands = [
        command(
            step,
            group_document(),
            job_id=job_id,
            attempt=attempt,
            group=NodeGroup(
                nodes=2,
                node=node,
                rendezvous_host=ADDRESSES[0],
                rendezvous_port=port,
                rendezvous_id=f"{job_id}-a{attempt}",
            ),
        )
        for node in range(2)
    ]
    statuses: list[int] = []
    other = threading.Thread(target=lambda: statuses.append(execute(commands[1], contexts[1])))
    other.start()
    statuses.append(execute(commands[0], contexts[0]))
    other.join(timeout=TIMEOUT_S)
    assert statuses == [EXIT_REPORTED, EXIT_REPORTED]


def model_bytes(s3: Any, ctx: StepContext) -> bytes:
    result = success_of(ctx)
    return s3.get_object(Bucket=BUCKET, Key=result["model_key"])["Body"].read()


def notify_both_at_step(
    contexts: list[StepContext], job_id: str, attempt: int, step: int
) -> threading.Thread:
    """A notice to both nodes once node 0's progress says ``step``, as the control plane sends it to every node."""
    progress = layout.NvmeLayout(contexts[0].nvme_root, job_id).progress_file(attempt)

    def watch() -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            reached = read_progress(progress)
            if reached is not None and reached.step >= step:
                for ctx in contexts:
                    ctx.watcher.interrupt(Notice(kind="interruption", source="test", action="terminate"))
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_an_interrupted_group_resumes_its_committed_checkpoint_and_trains_the_same_model(s3, tmp_path):
    # Given an uninterrupted 2-node run of the job, for reference
    reference = node_contexts(s3, tmp_path / "reference", "j-000000000009")
    run_group(s3, reference, "train", "j-000000000009", attempt=1)
    expected = model_bytes(s3, reference[0])
    assert success_of(reference[1])["node"] == 1

    # When the same job runs, both nodes get a notice after step 7, and both report
    job = "j-000000000001"
    first = node_contexts(s3, tmp_path / "first", job)
    notify_both_at_step(first, job, attempt=1, step=7)
    run_group(s3, first, "train", job, attempt=1)

    # Then the group stopped at one step past 7, whose checkpoint holds both nodes' parts, committed once
    committed = checkpoint_store.latest_committed(s3, BUCKET, job)
    assert committed is not None
    assert 7 <= committed.step < TOTAL_STEPS
    marker = checkpoint_store.read_marker(s3, BUCKET, job, committed.step)
    assert [f.path for f in marker.files] == ["node-001.json", "rng.pt", "state.pt"]
    for ctx in first:
        error, _ = failure_of(ctx)
        assert error == SPOT_INTERRUPTED

    # When attempt 2 stages both nodes onto fresh disks and trains
    second = node_contexts(s3, tmp_path / "second", job)
    run_group(s3, second, "stage", job, attempt=2)
    assert success_of(second[0])["restored_step"] == committed.step
    assert success_of(second[1])["node"] == 1
    second = [context_with_code(ctx, job) for ctx in second]
    run_group(s3, second, "train", job, attempt=2)

    # Then the model is byte for byte the uninterrupted group's, and node 1 said it was done
    assert model_bytes(s3, second[0]) == expected
    assert success_of(second[1])["node"] == 1


def context_with_code(ctx: StepContext, job_id: str) -> StepContext:
    """The same node for its next step (a fresh reporter); its staged disk kept."""
    fresh = context(ctx.s3, ctx.nvme_root)
    fresh.base_env = ctx.base_env
    fresh.local_ipv4 = ctx.local_ipv4
    return fresh

"""The hf-tiny-classifier example under torchrun, as its README runs it: 2 processes (gloo, CPU) that stop at one
step on the checkpoint signal and resume to the bytes of an uninterrupted 2-process run; and as a group of 2 nodes
(two torchruns at 127.0.0.1 and 127.0.0.2), each leaving its part of the checkpoint; and the ranks' choice of the
checkpoint to resume, in a gloo group of two processes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from spotrun import training
from spotrun.model import layout
from spotrun.shape import REPO_ROOT
from tests.integration.torch_ranks import run_ranks

EXAMPLE = REPO_ROOT / "examples" / "hf-tiny-classifier" / "train.py"

TORCHRUN_STEPS = 24  # 2 epochs of 384 sentences in global batches of 2 x 16: 12 steps each
SIGNAL_AFTER = 5  # the signal goes out once step 5 is reported: the stop lands mid-epoch, after the save of 4
# A run takes 10-20 s on 2 idle cores (most of it importing transformers); a shared machine can take several
# times that, and a group whose ranks disagree waits in a collective forever: this bound tells the two apart.
GROUP_TIMEOUT_S = 180


ONE_NODE = ("--standalone", "--nproc-per-node", "2")


def torchrun(workdir: Path, *script_args: str, launcher: tuple[str, ...] = ONE_NODE) -> subprocess.Popen[str]:
    """The example under ``torchrun`` (2 processes on one node by default) in ``workdir``, with the contract's
    variables set there."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPOTRUN_")}
    env.update(
        PYTHONPATH=str(REPO_ROOT),
        HF_HUB_OFFLINE="1",
        GLOO_SOCKET_IFNAME="lo",
        SPOTRUN_CHECKPOINT_DIR=str(workdir / "checkpoints"),
        SPOTRUN_OUTPUT_DIR=str(workdir / "output"),
        SPOTRUN_PROGRESS_FILE=str(workdir / "progress"),
        SPOTRUN_CHECKPOINT_INTERVAL_STEPS="4",
    )
    command = [sys.executable, "-m", "torch.distributed.run", *launcher]
    with (workdir / "torchrun.log").open("a") as log:  # the child writes to its own copy of the descriptor
        return subprocess.Popen(
            [*command, str(EXAMPLE), *script_args], cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )  # fmt: skip


def finish(process: subprocess.Popen[str], timeout: float = GROUP_TIMEOUT_S) -> int:
    """Its exit status; a group that hangs (ranks that disagree wait in a collective) is killed and fails."""
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        pytest.fail(f"torchrun did not end within {timeout} s")


def rank_process(process: subprocess.Popen[str], rank: int) -> int:
    """The pid of the worker torchrun started for ``rank`` (``RANK`` in its environment)."""
    import psutil

    workers = psutil.Process(process.pid).children()
    [pid] = [worker.pid for worker in workers if worker.environ().get("RANK") == str(rank)]
    return pid


def reported_step(workdir: Path) -> int:
    text = (workdir / "progress").read_text() if (workdir / "progress").exists() else ""
    return int(text.split()[0]) if text.strip() else 0


@pytest.fixture(scope="module")
def torchrun_uninterrupted(tmp_path_factory) -> Path:
    """The example's output directory after an uninterrupted 2-process run."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    workdir = tmp_path_factory.mktemp("torchrun-uninterrupted")
    assert finish(torchrun(workdir)) == 0, (workdir / "torchrun.log").read_text()
    return workdir / "output"


def test_two_torchrun_ranks_stop_at_one_step_when_only_one_got_the_signal_and_resume_to_the_same_bytes(
    tmp_path, torchrun_uninterrupted
):
    # Given the example training as 2 torchrun processes, slowed to 0.2 s a step
    group = torchrun(tmp_path, "--step-seconds", "0.2")
    deadline = time.monotonic() + GROUP_TIMEOUT_S
    while reported_step(tmp_path) < SIGNAL_AFTER and group.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)

    # When the checkpoint signal reaches rank 1 only (as when only its node was warned)
    os.kill(rank_process(group, 1), signal.SIGTERM)
    assert finish(group) != 0  # preempted: the ranks exited 128 + SIGTERM

    # Then both ranks stopped after the same step, mid-run, and saved one checkpoint of it with both ranks' RNG
    log = (tmp_path / "torchrun.log").read_text()
    [*_, (step, saved)] = layout.local_checkpoints(tmp_path / "checkpoints")
    assert SIGNAL_AFTER <= step < TORCHRUN_STEPS
    stops = [line for line in log.splitlines() if line.startswith("spotrun.training.huggingface: checkpoint")]
    assert stops == [f"spotrun.training.huggingface: checkpoint signal: saved step {step}, exiting"] * 2, log
    assert json.loads((saved / "trainer_state.json").read_text())["global_step"] == step
    assert {"rng_state_0.pth", "rng_state_1.pth", "optimizer.pt"} <= {path.name for path in saved.iterdir()}

    # When the group runs again / Then it resumes there and ends with the uninterrupted run's bytes
    assert finish(torchrun(tmp_path)) == 0, (tmp_path / "torchrun.log").read_text()
    assert f"huggingface: resumed at global step {step}\n" in (tmp_path / "torchrun.log").read_text()
    for name in ("model/model.safetensors", "metrics.json"):
        assert (tmp_path / "output" / name).read_bytes() == (torchrun_uninterrupted / name).read_bytes(), name


def node_launcher(node: int, port: int, rendezvous: str) -> tuple[str, ...]:
    """torchrun's arguments for node ``node`` of a 2-node group of 1 process each, as the agent gives them."""
    return (
        "--nnodes", "2", "--nproc-per-node", "1", "--max-restarts", "0",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", rendezvous,
        "--rdzv-conf", f"is_host={str(node == 0).lower()}", "--local-addr", f"127.0.0.{node + 1}",
    )  # fmt: skip


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_two_nodes_each_leave_their_part_of_the_step_and_resume_from_the_group_checkpoint(
    tmp_path, torchrun_uninterrupted
):
    # Given the example as a group of 2 nodes of 1 process each, slowed to 0.2 s a step
    nodes = [tmp_path / "node-0", tmp_path / "node-1"]
    port = free_port()
    group = []
    for node, workdir in enumerate(nodes):
        workdir.mkdir()
        group.append(
            torchrun(workdir, "--step-seconds", "0.2", launcher=node_launcher(node, port, "interrupted"))
        )
    deadline = time.monotonic() + GROUP_TIMEOUT_S
    while reported_step(nodes[0]) < SIGNAL_AFTER and group[0].poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)

    # When only node 1 is warned: its torchrun gets the checkpoint signal and forwards it to its rank
    group[1].send_signal(signal.SIGTERM)
    assert all(finish(run) != 0 for run in group)

    # Then both nodes saved the same step, each its own part: node 0 Trainer's state and rank 0's generators,
    # node 1 rank 1's generators only (distinct names, as the agent's group commit requires)
    [*_, (step, part_0)] = layout.local_checkpoints(nodes[0] / "checkpoints")
    [*_, (step_1, part_1)] = layout.local_checkpoints(nodes[1] / "checkpoints")
    assert step == step_1
    assert SIGNAL_AFTER <= step < TORCHRUN_STEPS
    assert {path.name for path in part_1.iterdir()} == {"rng_state_1.pth"}
    names_0 = {path.name for path in part_0.iterdir()}
    assert {"trainer_state.json", "optimizer.pt", "model.safetensors", "rng_state_0.pth"} <= names_0
    assert "rng_state_1.pth" not in names_0

    # When the group checkpoint (both parts) is restored onto both nodes, as the agent does, and the group restarts
    for source, destination in ((part_0, part_1), (part_1, part_0)):
        for path in list(source.iterdir()):
            shutil.copy2(path, destination / path.name)
    port = free_port()
    resumed = [
        torchrun(workdir, launcher=node_launcher(node, port, "resumed")) for node, workdir in enumerate(nodes)
    ]

    # Then both ranks resumed at that step, and the group ended with the model and metrics of an uninterrupted
    # run of 2 processes (on one node: the same ranks, the same bytes)
    assert [finish(run) for run in resumed] == [0, 0], (nodes[0] / "torchrun.log").read_text()
    assert f"huggingface: resumed at global step {step}\n" in (nodes[0] / "torchrun.log").read_text()
    for name in ("model/model.safetensors", "metrics.json"):
        assert (nodes[0] / "output" / name).read_bytes() == (torchrun_uninterrupted / name).read_bytes(), name


def resume_rank(rank: int, workdir: str, world: int) -> None:
    """One rank of node ``rank``: the checkpoint it would resume from, by name, in ``rank-N.json``."""
    import torch.distributed as dist

    from spotrun.training import huggingface

    root = Path(workdir)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{root / 'store'}",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=30),
    )
    run = training.Run(root, root, root / f"node-{rank}" / "checkpoints", root / "output")
    try:
        chosen = huggingface.resume_checkpoint(run, world)
        (root / f"rank-{rank}.json").write_text(json.dumps(None if chosen is None else chosen.name))
    finally:
        dist.destroy_process_group()


def test_a_group_resumes_from_the_newest_step_every_node_holds_whole_not_from_a_part(tmp_path):
    # Given 2 nodes of one rank each, both holding step 4 whole (as the agent restores a group checkpoint) and
    # only their own part of step 6 (as after torch elastic restarts the workers, with no restore in between)
    pytest.importorskip("torch")
    parts = {0: ["trainer_state.json", "optimizer.pt", "rng_state_0.pth"], 1: ["rng_state_1.pth"]}
    for node in (0, 1):
        checkpoints = tmp_path / f"node-{node}" / "checkpoints"
        for step, files in ((4, [*parts[0], *parts[1]]), (6, parts[node])):
            (checkpoints / layout.checkpoint_name(step)).mkdir(parents=True)
            for name in files:
                (checkpoints / layout.checkpoint_name(step) / name).write_text("{}")

    # When each rank asks where to resume
    chosen = run_ranks(resume_rank, tmp_path, 2, world=2)

    # Then both take step 4, each from its own node's directory
    assert chosen == [layout.checkpoint_name(4)] * 2

"""spotrun.training.pytorch on two nodes (one gloo rank each, each node its own checkpoint directory): every node
writes its part of the stop's checkpoint, and each resumes the restored checkpoint from its own directory, whether
rank 0 writes the replicated DDP state or every rank its FSDP shards through DCP."""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from spotrun import training
from spotrun.model import layout
from spotrun.training.pytorch import NODE_FILE, RNG_FILE, STATE_FILE, Position, TorchCheckpointer
from tests.integration.torch_ranks import run_ranks

NODES = 2
BATCHES_PER_EPOCH = 4
TOTAL_STEPS = 10
SIGNAL_AT = 6


def node_dir(root: Path, node: int) -> Path:
    return root / f"node-{node}" / "checkpoints"


def rank_main(rank: int, workdir: str, plan: tuple[int | None, bool]) -> None:
    """Rank ``rank`` alone on node ``rank``, as torchrun's environment says; writes ``rank-N.json``.

    ``plan``: the step after which node 1 gets the checkpoint signal (None: never), whether the model is FSDP's,
    sharded over the two ranks and checkpointed through DCP (else DDP's, saved by rank 0), and optionally rank 1's
    own checkpoint interval.
    """
    signal_at, sharded, *rest = plan
    rank_1_interval = rest[0] if rest else 100
    root = Path(workdir)
    os.environ["GROUP_RANK"] = str(rank)
    os.environ["LOCAL_RANK"] = "0"
    dist.init_process_group(
        "gloo",
        init_method=f"file://{root / 'store'}",
        rank=rank,
        world_size=NODES,
        timeout=timedelta(seconds=30),
    )
    run = training.Run(
        data_dir=root,
        code_dir=root,
        checkpoint_dir=node_dir(root, rank),
        output_dir=root / f"node-{rank}" / "output",
        # Only the stop's checkpoint, unless rank 1 is given an interval of its own (which rank 0's overrules).
        checkpoint_interval_steps=rank_1_interval if rank == 1 else 100,
    )
    run.install_signal_handler()
    if sharded:
        torch.manual_seed(0)  # FSDP shards each rank's own initial weights: the same on both
        model: nn.Module = nn.Sequential(nn.Linear(2, 4), nn.Linear(4, 1))
        fully_shard(model)
    else:
        model = nn.parallel.DistributedDataParallel(nn.Linear(2, 1))
    torch.manual_seed(rank)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    checkpointer = TorchCheckpointer(run, model, optimizer, sharded=sharded)
    position = resumed = checkpointer.resume()
    outcome: dict = {"resumed": list(resumed), "from": str(checkpointer.resumed_from)}
    try:
        while position.step < TOTAL_STEPS:
            optimizer.zero_grad()
            model(torch.rand(4, 2)).pow(2).sum().backward()
            optimizer.step()
            position = position.advance(BATCHES_PER_EPOCH)
            if rank == 1 and position.step == signal_at:
                os.kill(os.getpid(), signal.SIGTERM)
            outcome["trained"] = position.step
            checkpointer.step_done(position)
    except SystemExit as exited:
        outcome["exit"] = exited.code
    outcome["weights"] = [full(p).tolist() for p in model.parameters()]
    (root / f"rank-{rank}.json").write_text(json.dumps(outcome))
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def full(parameter: torch.Tensor) -> torch.Tensor:
    """The whole parameter: an FSDP shard gathered from every rank (a collective), else the tensor."""
    return parameter.full_tensor() if isinstance(parameter, DTensor) else parameter.detach()


def restore_whole_group_checkpoint(root: Path, name: str) -> None:
    """What the agents do: the committed checkpoint (every node's part) onto every node."""
    parts = [node_dir(root, node) / name for node in range(NODES)]
    for target in parts:
        for source in parts:
            for path in source.iterdir():
                if not (target / path.name).exists():
                    shutil.copy2(path, target / path.name)


def test_every_node_writes_its_part_and_resumes_from_its_own_copy(tmp_path):
    # Given two nodes of one rank each, of which node 1 gets the checkpoint signal after step 6
    # When they train
    first = run_ranks(rank_main, tmp_path, (SIGNAL_AT, False), NODES)

    # Then both stopped after step 6; node 0 wrote the state, node 1 its node file, each in its own directory
    assert [outcome["trained"] for outcome in first] == [SIGNAL_AT, SIGNAL_AT]
    name = "step-000000000006"
    assert sorted(p.name for p in (node_dir(tmp_path, 0) / name).iterdir()) == [RNG_FILE, STATE_FILE]
    part = node_dir(tmp_path, 1) / name / NODE_FILE.format(node=1)
    assert [p.name for p in (node_dir(tmp_path, 1) / name).iterdir()] == [part.name]
    assert json.loads(part.read_text()) == {"node": 1, "step": SIGNAL_AT, "world_size": NODES}

    # When the group checkpoint is restored onto both nodes and the group starts again
    restore_whole_group_checkpoint(tmp_path, name)
    second = run_ranks(rank_main, tmp_path, (None, False), NODES)

    # Then each node resumed step 6 from its own directory, and trained to the end
    assert [outcome["resumed"] for outcome in second] == [list(Position(6, 1, 2))] * NODES
    assert [outcome["from"] for outcome in second] == [
        str(node_dir(tmp_path, n) / name) for n in range(NODES)
    ]
    assert [outcome["trained"] for outcome in second] == [TOTAL_STEPS] * NODES


def test_fsdp_shards_are_each_nodes_part_and_the_resumed_group_trains_the_same_weights(tmp_path):
    # Given the weights an FSDP group of two nodes trains without interruption
    (tmp_path / "whole").mkdir()
    whole = run_ranks(rank_main, tmp_path / "whole", (None, True), NODES)

    # When the same group, checkpointing through DCP, is stopped after step 6
    split = tmp_path / "split"
    split.mkdir()
    run_ranks(rank_main, split, (SIGNAL_AT, True), NODES)

    # Then each node's directory holds only its own rank's shard (node 0 also DCP's metadata and the small state)
    name = "step-000000000006"
    assert sorted(p.name for p in (node_dir(split, 0) / name).iterdir()) == [
        ".metadata",
        "__0_0.distcp",
        RNG_FILE,
        STATE_FILE,
    ]
    assert sorted(p.name for p in (node_dir(split, 1) / name).iterdir()) == ["__1_0.distcp", "node-001.json"]

    # When the whole checkpoint is restored onto both nodes and the group resumes
    restore_whole_group_checkpoint(split, name)
    resumed = run_ranks(rank_main, split, (None, True), NODES)

    # Then it resumed step 6 and ends with the uninterrupted group's weights, bit for bit
    assert [outcome["resumed"] for outcome in resumed] == [list(Position(6, 1, 2))] * NODES
    assert [outcome["weights"] for outcome in resumed] == [outcome["weights"] for outcome in whole]


def test_rank_0s_schedule_decides_when_the_group_saves(tmp_path):
    # Given a group whose rank 1 would checkpoint every 3 steps and rank 0 never before the end (as two nodes'
    # clocks may disagree on a time-based interval)
    # When it trains to the end
    outcomes = run_ranks(rank_main, tmp_path, (None, False, 3), NODES)

    # Then both finished, and no checkpoint was taken: rank 1 never entered a save rank 0 did not
    assert [outcome["trained"] for outcome in outcomes] == [TOTAL_STEPS] * NODES
    assert [layout_steps(node_dir(tmp_path, n)) for n in range(NODES)] == [[], []]


def layout_steps(directory: Path) -> list[int]:
    return [step for step, _ in layout.local_checkpoints(directory)]

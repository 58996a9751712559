"""spotrun.training.pytorch with two gloo processes: one rank's signal stops both after the same step, and one
checkpoint holds the group."""

from __future__ import annotations

import gc
import json
import os
import signal
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from spotrun import training
from spotrun.training.pytorch import RNG_FILE, Position, TorchCheckpointer
from tests.integration.torch_ranks import run_ranks

WORLD = 2
BATCHES_PER_EPOCH = 4
TOTAL_STEPS = 12
SIGNALLED_RANK = 1
SIGNAL_AT = 6


def rank_main(rank: int, workdir: str, signal_at: int | None) -> None:
    """One rank: train, get SIGTERM at ``signal_at`` (rank 1 only), write what happened to ``rank-N.json``."""
    root = Path(workdir)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{root / 'store'}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=30),  # a rank left waiting fails the test rather than hanging it
    )
    outcome = train_rank(rank, root, signal_at)
    (root / f"rank-{rank}.json").write_text(json.dumps(outcome))
    # As the PyTorch example ends: the DDP wrapper (its reducer holds the process group) collected, then every
    # rank at the barrier, before the group is destroyed. This test used to destroy the group with the wrapper
    # still alive; a rank then sometimes died of SIGABRT at its exit, once in a fresh clone's `make test`. The
    # message was "terminate called without an active exception": a C++ thread of the group left joinable.
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def train_rank(rank: int, root: Path, signal_at: int | None) -> dict:
    """Train this rank from its checkpoint to ``TOTAL_STEPS`` or its stop; what happened, for the test."""
    run = training.Run(
        data_dir=root,
        code_dir=root,
        checkpoint_dir=root / "checkpoints",
        output_dir=root / "output",
        checkpoint_interval_steps=100,  # no periodic checkpoint: only the stop's
    )
    run.install_signal_handler()
    torch.manual_seed(rank)  # each rank's own generator: the checkpoint must keep both
    model = nn.parallel.DistributedDataParallel(nn.Linear(2, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    checkpointer = TorchCheckpointer(run, model, optimizer)
    position = resumed = checkpointer.resume()
    outcome = {"rank": rank, "resumed": list(resumed), "rng": torch.get_rng_state().sum().item()}
    try:
        while position.step < TOTAL_STEPS:
            optimizer.zero_grad()
            model(torch.rand(4, 2)).sum().backward()
            optimizer.step()
            position = position.advance(BATCHES_PER_EPOCH)
            if rank == SIGNALLED_RANK and position.step == signal_at:
                os.kill(os.getpid(), signal.SIGTERM)
            outcome["trained"] = position.step
            checkpointer.step_done(position)
    except SystemExit as exited:
        outcome["exit"] = exited.code
    return outcome


def run_group(workdir: Path, signal_at: int | None) -> list[dict]:
    return run_ranks(rank_main, workdir, signal_at, WORLD)


def test_one_ranks_signal_stops_every_rank_after_the_same_step_with_one_checkpoint(tmp_path):
    # Given two ranks, of which only rank 1 gets the checkpoint signal, after step 6
    # When they train
    first = run_group(tmp_path, SIGNAL_AT)

    # Then both stopped after step 6, exiting for preemption, and one checkpoint of step 6 holds both generators
    assert [outcome["trained"] for outcome in first] == [SIGNAL_AT, SIGNAL_AT]
    assert [outcome["exit"] for outcome in first] == [128 + signal.SIGTERM] * WORLD
    checkpoints = sorted(path.name for path in (tmp_path / "checkpoints").iterdir())
    assert checkpoints == ["step-000000000006"]
    generators = torch.load(tmp_path / "checkpoints" / checkpoints[0] / RNG_FILE, weights_only=True)
    assert len(generators) == WORLD
    assert not torch.equal(generators[0]["torch"], generators[1]["torch"])

    # When the group starts again
    second = run_group(tmp_path, None)

    # Then every rank resumed the same position, its own generator, and trained to the end
    assert [outcome["resumed"] for outcome in second] == [list(Position(6, 1, 2))] * WORLD
    assert [outcome["rng"] for outcome in second] == [
        generators[rank]["torch"].sum().item() for rank in range(WORLD)
    ]
    assert [outcome["trained"] for outcome in second] == [TOTAL_STEPS, TOTAL_STEPS]

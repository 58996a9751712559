"""spotrun.training.pytorch's loaders under two gloo processes: each rank's loader position is saved in the one
checkpoint, and each rank resumes its own."""

from __future__ import annotations

import json
import os
import signal
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset

from spotrun import training
from spotrun.training.pytorch import LOADERS_FILE, TorchCheckpointer, resumable_loader
from tests.integration.torch_ranks import run_ranks

WORLD = 2
EPOCHS = 2
DATASET = TensorDataset(torch.arange(24))
BATCHES_PER_EPOCH = 6  # 24 samples in batches of 4
STOP_AT = 8  # in the second epoch


def loader(rank: int):
    return resumable_loader(DATASET, batch_size=4, shuffle=True, seed=100 + rank)  # each rank its own order


def rank_main(rank: int, workdir: str, stop: bool) -> None:
    root = Path(workdir)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{root / 'store'}",
        rank=rank,
        world_size=WORLD,
        timeout=timedelta(seconds=30),
    )
    run = training.Run(root, root, root / "checkpoints", root / "output", checkpoint_interval_steps=100)
    run.install_signal_handler()
    data = loader(rank)
    checkpointer = TorchCheckpointer(run, torch.nn.Linear(1, 1), loaders={"train": data})
    position = checkpointer.resume()
    seen: list[list[int]] = []
    try:
        while position.epoch < EPOCHS:
            for (batch,) in data:
                seen.append(batch.tolist())
                position = position.advance(BATCHES_PER_EPOCH)
                if stop and rank == 1 and position.step == STOP_AT:
                    os.kill(os.getpid(), signal.SIGTERM)
                checkpointer.step_done(position)
    except SystemExit:
        pass
    (root / f"rank-{rank}.json").write_text(json.dumps(seen))
    dist.barrier()
    dist.destroy_process_group()


def run_group(workdir: Path, stop: bool) -> list[list[list[int]]]:
    return run_ranks(rank_main, workdir, stop, WORLD)


def test_each_rank_resumes_its_own_loader_position_from_the_one_checkpoint(tmp_path):
    # Given each rank's batches over two uninterrupted epochs
    loaders = [loader(rank) for rank in range(WORLD)]
    expected = [[batch.tolist() for _ in range(EPOCHS) for (batch,) in each] for each in loaders]

    # When the group stops at step 8 (rank 1 signalled), then starts again from its checkpoint
    first = run_group(tmp_path, stop=True)
    states = torch.load(tmp_path / "checkpoints" / "step-000000000008" / LOADERS_FILE, weights_only=True)
    second = run_group(tmp_path, stop=False)

    # Then one checkpoint held both ranks' loaders, and each rank went on with its own batches, exactly
    assert len(states) == WORLD
    assert [len(batches) for batches in first] == [STOP_AT, STOP_AT]
    assert [a + b for a, b in zip(first, second, strict=True)] == expected

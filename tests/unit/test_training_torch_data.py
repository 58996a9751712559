"""spotrun.training.pytorch_data in one process: a loader resumed mid-epoch yields what an uninterrupted one does,
in that epoch and the next ones, and a loader that cannot resume exactly is refused."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from spotrun import training
from spotrun.training.pytorch import Position, TorchCheckpointer, resumable_loader

DATASET = TensorDataset(torch.arange(40))
EPOCHS = 3


def batches(loader, epochs: int) -> list[list[int]]:
    return [batch.tolist() for _ in range(epochs) for (batch,) in loader]


def test_a_loader_resumed_mid_epoch_yields_the_uninterrupted_batches_in_that_epoch_and_the_next(tmp_path):
    # Given the batches of three uninterrupted epochs
    expected = batches(resumable_loader(DATASET, batch_size=4, shuffle=True, seed=5), EPOCHS)

    # When a loader stops after five batches of the first epoch, and a new one resumes from its state
    first = resumable_loader(DATASET, batch_size=4, shuffle=True, seed=5)
    seen = []
    for (batch,) in first:
        seen.append(batch.tolist())
        if len(seen) == 5:
            break
    state = first.state_dict()
    torch.save(state, tmp_path / "loader.pt")
    resumed = resumable_loader(DATASET, batch_size=4, shuffle=True, seed=5)
    resumed.load_state_dict(
        torch.load(tmp_path / "loader.pt", weights_only=True)
    )  # as the checkpointer loads
    seen += batches(resumed, EPOCHS)  # the rest of the first epoch, then two whole ones

    # Then it is the uninterrupted order, the next epochs' included (its generator continued where it was)
    assert seen == expected


def test_the_loader_draws_nothing_from_the_global_generator():
    # Given the global generator's state
    torch.manual_seed(3)
    before = torch.get_rng_state()

    # When a loader is built and iterated twice
    loader = resumable_loader(DATASET, batch_size=4, shuffle=True)
    batches(loader, 2)

    # Then the global generator did not move: a resume that builds one iterator more changes nothing else
    assert torch.equal(torch.get_rng_state(), before)


def run(tmp_path) -> training.Run:
    return training.Run(tmp_path, tmp_path, tmp_path / "checkpoints", tmp_path / "output")


def test_a_loader_that_cannot_resume_exactly_is_refused_with_what_to_use(tmp_path):
    # Given / When / Then a plain DataLoader (no state), and a stateful one on the global generator
    with pytest.raises(TypeError, match="resumable_loader"):
        TorchCheckpointer(run(tmp_path), torch.nn.Linear(1, 1), loaders={"train": DataLoader(DATASET)})
    with pytest.raises(ValueError, match="global generator"):
        TorchCheckpointer(
            run(tmp_path), torch.nn.Linear(1, 1), loaders={"train": StatefulDataLoader(DATASET)}
        )


def test_a_checkpoint_without_the_loaders_state_is_not_resumed_silently(tmp_path):
    # Given a checkpoint written without loaders
    model = torch.nn.Linear(1, 1)
    TorchCheckpointer(run(tmp_path), model).save(Position(3, 0, 3))

    # When a checkpointer with a loader resumes it / Then it says the loader's state is missing
    loader = resumable_loader(DATASET, batch_size=4)
    with pytest.raises(RuntimeError, match="no data loader state"):
        TorchCheckpointer(run(tmp_path), model, loaders={"train": loader}).resume()

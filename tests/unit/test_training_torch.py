"""spotrun.training.pytorch in one process: a resumed run continues exactly, and a failed save leaves nothing."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch import nn

from spotrun import training
from spotrun.training import pytorch
from spotrun.training.pytorch import Position, TorchCheckpointer

SAMPLES = 24
BATCH = 4
BATCHES_PER_EPOCH = SAMPLES // BATCH
EPOCHS = 3
TOTAL = BATCHES_PER_EPOCH * EPOCHS


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(3, 8)
        self.dropout = nn.Dropout(0.5)  # draws from torch's generator every step
        self.head = nn.Linear(8, 1)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(torch.relu(self.layer(inputs))))


def make_run(tmp_path, interval: int = 5) -> training.Run:
    return training.Run(
        data_dir=tmp_path,
        code_dir=tmp_path,
        checkpoint_dir=tmp_path / "checkpoints",
        output_dir=tmp_path / "output",
        checkpoint_interval_steps=interval,
    )


def train(run: training.Run, stop_at: int | None = None, *, sharded: bool = False) -> tuple[list[float], Net]:
    """A loop that uses every generator and every saved object; ``stop_at``: the signal comes at that step."""
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    data = torch.linspace(-1, 1, SAMPLES * 3).reshape(SAMPLES, 3)
    targets = data.sum(1, keepdim=True)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**4, growth_interval=3)
    checkpointer = TorchCheckpointer(run, model, optimizer, scheduler, scaler, sharded=sharded)
    position = checkpointer.resume()
    losses: list[float] = []
    while position.epoch < EPOCHS:
        order = pytorch.epoch_order(SAMPLES, position.epoch, seed=7)
        batch = order[position.batch * BATCH : (position.batch + 1) * BATCH]
        noise = float(np.random.normal()) * 0.01 + random.random() * 0.01
        optimizer.zero_grad()
        loss = ((model(data[batch]) - targets[batch]) ** 2).mean() + noise
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        losses.append(loss.item())
        position = position.advance(BATCHES_PER_EPOCH)
        if position.step == stop_at:
            run.request_stop()
        checkpointer.step_done(position)
    return losses, model


@pytest.mark.parametrize("stop_at", [8, 10])  # mid-epoch between checkpoints; on a periodic checkpoint's step
def test_a_stopped_and_resumed_run_has_the_loss_curve_and_weights_of_an_uninterrupted_one(tmp_path, stop_at):
    # Given the losses and weights of an uninterrupted run
    expected_losses, expected_model = train(make_run(tmp_path / "whole"))

    # When another run gets the checkpoint signal at ``stop_at`` and a fresh process-like start resumes it
    run = make_run(tmp_path / "split")
    with pytest.raises(SystemExit) as exited:
        train(run, stop_at=stop_at)
    assert exited.value.code == 128 + 15
    assert run.latest_checkpoint() is not None
    assert run.latest_checkpoint().step == stop_at
    resumed_losses, resumed_model = train(make_run(tmp_path / "split"))

    # Then the steps after the stop are the uninterrupted run's, bit for bit, and so are the final weights
    assert resumed_losses == expected_losses[stop_at:]
    for (name, tensor), (_, other) in zip(
        expected_model.state_dict().items(), resumed_model.state_dict().items(), strict=True
    ):
        assert torch.equal(tensor, other), name


def test_a_sharded_checkpoint_resumes_exactly_too(tmp_path):
    # Given the losses and weights of an uninterrupted run
    expected_losses, expected_model = train(make_run(tmp_path / "whole"))

    # When another run, saving the model and optimizer through DCP, is stopped at step 8 and resumed
    run = make_run(tmp_path / "split")
    with pytest.raises(SystemExit):
        train(run, stop_at=8, sharded=True)
    latest = run.latest_checkpoint()
    assert latest is not None
    resumed_losses, resumed_model = train(make_run(tmp_path / "split"), sharded=True)

    # Then its checkpoint holds DCP's files beside the small state, and the run continued bit for bit
    assert sorted(p.name for p in latest.path.iterdir()) == [
        ".metadata",
        "__0_0.distcp",
        "rng.pt",
        "state.pt",
    ]
    assert "model" not in torch.load(latest.path / "state.pt", weights_only=True)
    assert resumed_losses == expected_losses[8:]
    for (name, tensor), (_, other) in zip(
        expected_model.state_dict().items(), resumed_model.state_dict().items(), strict=True
    ):
        assert torch.equal(tensor, other), name


@pytest.mark.parametrize("saved_sharded", [True, False])
def test_a_checkpoint_is_resumed_only_as_it_was_saved(tmp_path, saved_sharded):
    # Given a checkpoint saved sharded (or not)
    run = make_run(tmp_path)
    with pytest.raises(SystemExit):
        train(run, stop_at=3, sharded=saved_sharded)

    # When a checkpointer of the other kind resumes it, then it is refused, saying which kind to build
    with pytest.raises(RuntimeError, match=f"sharded={saved_sharded}"):
        train(make_run(tmp_path), sharded=not saved_sharded)


def test_resume_on_a_fresh_start_is_the_beginning(tmp_path):
    # Given a run without checkpoints
    checkpointer = TorchCheckpointer(make_run(tmp_path), Net())
    # When it resumes
    # Then it starts at step 0 of epoch 0
    assert checkpointer.resume() == Position(0, 0, 0)


def test_a_save_that_dies_midway_leaves_no_checkpoint_and_the_previous_one_is_resumed(tmp_path, monkeypatch):
    # Given a run with a checkpoint at step 5
    run = make_run(tmp_path)
    model = Net()
    checkpointer = TorchCheckpointer(run, model, torch.optim.SGD(model.parameters(), lr=0.1))
    checkpointer.save(Position(5, 0, 5))
    real_save = torch.save

    def dies_after_the_model(obj, path, *args, **kwargs):
        if str(path).endswith(pytorch.RNG_FILE):
            raise OSError("disk full")
        real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", dies_after_the_model)

    # When the save of step 10 fails after its first file
    with pytest.raises(OSError, match="disk full"):
        checkpointer.save(Position(10, 1, 4))

    # Then no trace of step 10 is left and the resume is from step 5
    assert [checkpoint.step for checkpoint in run.checkpoints()] == [5]
    assert sorted(path.name for path in run.checkpoint_dir.iterdir()) == ["step-000000000005"]
    assert TorchCheckpointer(run, Net()).resume() == Position(5, 0, 5)


def test_the_position_moves_to_the_next_epoch_after_its_last_batch():
    # Given a position at the last batch of epoch 1
    position = Position(step=11, epoch=1, batch=5)
    # When one more batch is done, then it is the start of epoch 2
    assert position.advance(6) == Position(12, 2, 0)
    assert Position(3, 0, 2).advance(6) == Position(4, 0, 3)


def test_the_epoch_order_depends_on_the_seed_and_epoch_only():
    # Given the order of epoch 2
    first = pytorch.epoch_order(50, 2, seed=1)
    # When the global generator moves on, the order is unchanged; another epoch gives another order
    torch.rand(100)
    assert pytorch.epoch_order(50, 2, seed=1) == first
    assert pytorch.epoch_order(50, 3, seed=1) != first
    assert sorted(first) == list(range(50))


def test_only_rank_0_writes_the_progress_file(tmp_path):
    # Given the contract's environment, as torchrun's rank 1 sees it
    environ = {training.ENV_PROGRESS_FILE: str(tmp_path / "progress.json"), "RANK": "1"}
    # When the run is built there and on rank 0
    other = pytorch.run_from_env(environ=environ, checkpoint_dir=tmp_path, handle_signal=False)
    first = pytorch.run_from_env(
        environ={**environ, "RANK": "0"}, checkpoint_dir=tmp_path, handle_signal=False
    )
    # Then only rank 0 has somewhere to report
    assert other.progress_file is None
    assert first.progress_file == tmp_path / "progress.json"


def test_the_final_model_file_is_byte_identical_for_identical_weights(tmp_path):
    # Given two models with the same weights
    torch.manual_seed(3)
    one = Net()
    two = Net()
    two.load_state_dict(one.state_dict())
    # When each is saved
    pytorch.save_safetensors(one)(tmp_path / "one")
    pytorch.save_safetensors(two)(tmp_path / "two")
    # Then the files are the same bytes
    assert (tmp_path / "one").read_bytes() == (tmp_path / "two").read_bytes()

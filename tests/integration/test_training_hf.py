"""spotrun.training.huggingface with a real Trainer, in process: the signal, the resume, and atomic saves.

The model and data are the hf-tiny-classifier example's, made smaller: 96 sentences in batches of 16 over two
epochs, 12 steps in all. transformers is imported once, by the module fixture, so that collecting the suite
does not pay for it. The example under torchrun, as several processes: test_training_hf_torchrun.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from spotrun import training
from spotrun.shape import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "hf-tiny-classifier" / "train.py"
SIGNAL = signal.SIGUSR1  # not SIGTERM: pytest's own process must not be at risk if a handler is missing
TOTAL_STEPS = 12
STOP_STEP = 5  # the signal arrives during this step (mid-epoch), so its end is the next step boundary
TRAINER_FILES = {"trainer_state.json", "optimizer.pt", "scheduler.pt", "rng_state.pth", "model.safetensors"}


@pytest.fixture(scope="module")
def example() -> Iterator[ModuleType]:
    """The example script as a module (its model, tokenizer and data), with torch's process state restored."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("hf_tiny_classifier_train", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield module
    torch.set_num_threads(threads)


def new_run(root: Path, metrics_file: Path | None = None) -> training.Run:
    return training.Run(
        data_dir=root / "data",
        code_dir=root,
        checkpoint_dir=root / "checkpoints",
        output_dir=root / "output",
        checkpoint_interval_steps=100,  # no periodic save in 12 steps: only the signal's
        checkpoint_signal=SIGNAL,
        metrics_file=metrics_file,
    )


def new_trainer(
    example: ModuleType, run: training.Run, callbacks: Sequence[Any] = (), cls: Any = None, **arguments: Any
) -> Any:
    from transformers import Trainer, TrainingArguments, set_seed

    set_seed(0)
    tokenizer = example.WordTokenizer.build()
    from spotrun.training import huggingface

    trainer_class = cls or Trainer
    return trainer_class(
        model=example.build_model(len(tokenizer.vocabulary), tokenizer.length),
        args=TrainingArguments(
            output_dir=str(huggingface.scratch_dir(run)),
            save_strategy="no",
            num_train_epochs=2,
            per_device_train_batch_size=16,
            learning_rate=5e-3,
            warmup_steps=3,
            seed=0,
            use_cpu=True,
            report_to="none",
            disable_tqdm=True,
            **{"logging_strategy": "no", **arguments},
        ),
        train_dataset=example.SentenceDataset(example.generate(96, 0), tokenizer),
        eval_dataset=example.SentenceDataset(example.generate(32, 1), tokenizer),
        compute_metrics=example.accuracy,
        callbacks=list(callbacks),
    )


def snapshot(optimizer: Any, scheduler: Any) -> dict[str, Any]:
    """Deep copies of the optimizer's and the scheduler's state, comparable with :func:`same`."""
    import copy

    return {"optimizer": copy.deepcopy(optimizer.state_dict()), "scheduler": dict(scheduler.state_dict())}


def same(left: Any, right: Any) -> bool:
    """Equal, tensors included (bit for bit)."""
    import torch

    if isinstance(left, torch.Tensor):
        return isinstance(right, torch.Tensor) and torch.equal(left, right)
    if isinstance(left, dict):
        return (
            isinstance(right, dict)
            and left.keys() == right.keys()
            and all(same(left[k], right[k]) for k in left)
        )
    if isinstance(left, list | tuple):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=True))
    return bool(left == right)


class Recorder:
    """A callback recording where training began, each step run, and the state after one chosen step."""

    def __init__(self, at_step: int | None = None, signal_during: int | None = None) -> None:
        from transformers import TrainerCallback

        recorder = self

        class _Callback(TrainerCallback):
            def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
                recorder.began_at = state.global_step
                recorder.at_begin = snapshot(optimizer, lr_scheduler)

            def on_step_begin(self, args, state, control, **kwargs):
                if state.global_step + 1 == signal_during:
                    os.kill(os.getpid(), SIGNAL)  # the handler only sets a flag: the step goes on

            def on_step_end(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
                recorder.steps.append(state.global_step)
                if state.global_step == at_step:
                    recorder.at_step = snapshot(optimizer, lr_scheduler)

        self.callback = _Callback()
        self.steps: list[int] = []
        self.began_at: int | None = None
        self.at_begin: dict[str, Any] = {}
        self.at_step: dict[str, Any] = {}


@pytest.fixture
def handled_signal() -> Iterator[None]:
    previous = signal.getsignal(SIGNAL)
    yield
    signal.signal(SIGNAL, previous)


@pytest.fixture(scope="module")
def uninterrupted(example, tmp_path_factory) -> dict[str, Any]:
    """The run without a signal: its state after STOP_STEP, its final weights, optimizer and metrics."""
    from spotrun.training import huggingface

    run = new_run(tmp_path_factory.mktemp("uninterrupted"))
    recorder = Recorder(at_step=STOP_STEP)
    trainer = new_trainer(example, run, [recorder.callback])
    huggingface.train(trainer, run)
    return {
        "at_stop_step": recorder.at_step,
        "final": snapshot(trainer.optimizer, trainer.lr_scheduler),
        "weights": {k: v.clone() for k, v in trainer.model.state_dict().items()},
        "metrics": metrics_of(trainer),
        "steps": recorder.steps,
    }


def metrics_of(trainer: Any) -> dict[str, float]:
    metrics = trainer.evaluate()
    return {key: metrics[key] for key in ("eval_loss", "eval_accuracy", "epoch")}


def interrupt(example: ModuleType, run: training.Run) -> Recorder:
    """Train with the checkpoint signal sent during STOP_STEP; expect the preemption exit."""
    from spotrun.training import huggingface

    run.install_signal_handler()
    recorder = Recorder(signal_during=STOP_STEP)
    with pytest.raises(SystemExit) as exited:
        huggingface.train(new_trainer(example, run, [recorder.callback]), run)
    assert exited.value.code == 128 + SIGNAL
    return recorder


def test_the_signal_saves_the_next_step_boundary_and_stops_with_trainers_own_checkpoint(
    example, tmp_path, handled_signal
):
    # Given a run whose checkpoint signal arrives in the middle of step 5
    run = new_run(tmp_path)

    # When it trains (interrupt() expects the exit with status 128 + signal)
    recorder = interrupt(example, run)

    # Then training stopped at the end of that step, and its checkpoint is the only one, in Trainer's layout
    assert recorder.steps == list(range(1, STOP_STEP + 1))
    [checkpoint] = run.checkpoints()
    assert checkpoint.step == STOP_STEP
    assert {path.name for path in checkpoint.path.iterdir()} >= TRAINER_FILES
    assert json.loads((checkpoint.path / "trainer_state.json").read_text())["global_step"] == STOP_STEP
    # And nothing of it is left in the Trainer's scratch directory
    from spotrun.training import huggingface

    assert not list(huggingface.scratch_dir(run).glob("checkpoint-*"))


def test_a_resumed_run_continues_at_the_step_with_optimizer_and_scheduler_and_ends_like_the_uninterrupted(
    example, tmp_path, handled_signal, uninterrupted
):
    # Given a run stopped by the signal at step 5
    run = new_run(tmp_path)
    interrupt(example, run)

    # When a new process's trainer (a new Trainer, model and run) trains again
    from spotrun.training import huggingface

    resumed_run = new_run(tmp_path)
    recorder = Recorder()
    trainer = new_trainer(example, resumed_run, [recorder.callback])
    huggingface.train(trainer, resumed_run)

    # Then it began at global step 5 with the optimizer and scheduler exactly as the uninterrupted run had them
    assert recorder.began_at == STOP_STEP
    assert recorder.steps == list(range(STOP_STEP + 1, TOTAL_STEPS + 1))
    assert same(recorder.at_begin["optimizer"], uninterrupted["at_stop_step"]["optimizer"])
    assert same(recorder.at_begin["scheduler"], uninterrupted["at_stop_step"]["scheduler"])
    # And it ended with the same weights, optimizer and scheduler state, and evaluation metrics
    assert same(dict(trainer.model.state_dict()), uninterrupted["weights"])
    assert same(snapshot(trainer.optimizer, trainer.lr_scheduler), uninterrupted["final"])
    assert metrics_of(trainer) == uninterrupted["metrics"]
    assert uninterrupted["steps"] == list(range(1, TOTAL_STEPS + 1))


def test_the_contract_interval_saves_through_the_contract_whatever_the_arguments_say(example, tmp_path):
    # Given a run with a checkpoint interval of 4 and Trainer arguments that save nothing (save_strategy "no")
    from spotrun.training import huggingface

    run = new_run(tmp_path)
    run.checkpoint_interval_steps = 4

    # When it trains to the end
    huggingface.train(new_trainer(example, run), run)

    # Then a checkpoint of each multiple of 4 is in the checkpoint directory (keep_local keeps the newest 3)
    assert [checkpoint.step for checkpoint in run.checkpoints()] == [4, 8, 12]


class SaveFailure(RuntimeError):
    pass


@pytest.mark.parametrize("where", ["while Trainer writes", "while it moves into place"])
def test_a_save_that_dies_midway_leaves_no_checkpoint_in_the_contract_directory(
    example, tmp_path, monkeypatch, where
):
    # Given a run whose first save (at step 4) fails after part of its files are written or moved
    from transformers import Trainer

    from spotrun.training import huggingface

    run = new_run(tmp_path)
    run.checkpoint_interval_steps = 4

    class DyingTrainer(Trainer):
        def _save_rng_state(self, output_dir):  # after the model, optimizer and scheduler are written
            raise SaveFailure(output_dir)

    moved: list[str] = []

    def dying_move(source: str, destination: str) -> str:
        if len(moved) == 2:
            raise SaveFailure(source)
        moved.append(source)
        return str(shutil.move(source, destination))

    if where == "while it moves into place":
        monkeypatch.setattr(huggingface.shutil, "move", dying_move)
    trainer_class = DyingTrainer if where == "while Trainer writes" else Trainer

    # When it trains
    with pytest.raises(SaveFailure):
        huggingface.train(new_trainer(example, run, cls=trainer_class), run)

    # Then the agent would find no checkpoint: no directory of a final name, complete or not
    assert run.checkpoints() == []
    assert [path.name for path in run.checkpoint_dir.iterdir()] == [huggingface.SCRATCH_NAME]

    # And the next run clears what the dead save left in the scratch directory, then saves whole checkpoints
    [leftover] = huggingface.scratch_dir(run).glob("checkpoint-*")
    (leftover / "stale-from-the-dead-save").write_bytes(b"x")
    monkeypatch.undo()
    huggingface.train(new_trainer(example, run), run)
    assert [checkpoint.step for checkpoint in run.checkpoints()] == [4, 8, 12]
    first = run.checkpoints()[0].path
    assert {path.name for path in first.iterdir()} >= TRAINER_FILES
    assert not (first / "stale-from-the-dead-save").exists()
    assert not list(huggingface.scratch_dir(run).glob("checkpoint-*"))


def test_arguments_that_would_not_resume_exactly_stop_training_before_its_first_step(example, tmp_path):
    # Given a trainer whose checkpoints would hold the model only
    from spotrun.training import huggingface

    run = new_run(tmp_path)
    recorder = Recorder()
    trainer = new_trainer(example, run, [recorder.callback], save_only_model=True)

    # When it trains / Then the callback refuses when training begins, before any step
    with pytest.raises(ValueError, match="save_only_model"):
        huggingface.train(trainer, run)
    assert recorder.steps == []


def test_the_callback_reports_trainers_logs_as_the_runs_metrics(example, tmp_path):
    # Given a run under spotrun (its metrics file) and a trainer logging every 4 of its 12 steps
    from spotrun.training import huggingface

    metrics = tmp_path / "metrics.jsonl"
    run = new_run(tmp_path, metrics)
    trainer = new_trainer(example, run, logging_strategy="steps", logging_steps=4)

    # When it trains and evaluates
    huggingface.train(trainer, run)
    trainer.evaluate()

    # Then the curve (loss, learning rate, gradient norm, epoch) is reported at the logged steps, then the
    # evaluation, and the end-of-training summary is not a series
    reports = [json.loads(line) for line in metrics.read_text().splitlines()]
    curve = [r for r in reports if "loss" in r["values"]]
    assert [r["step"] for r in curve] == [4, 8, 12]
    assert set(curve[0]["values"]) == {"loss", "learning_rate", "grad_norm", "epoch"}
    evaluation = reports[-1]
    assert evaluation["step"] == 12
    assert {"eval_loss", "eval_accuracy", "epoch"} <= set(evaluation["values"])
    assert not any("train_runtime" in r["values"] or "total_flos" in r["values"] for r in reports)

"""The checkpoint contract for Hugging Face ``Trainer`` scripts.

:mod:`spotrun.training` is the contract; this module fits it to ``transformers.Trainer`` in one call::

    from transformers import Trainer, TrainingArguments

    from spotrun import training
    from spotrun.training import huggingface

    run = training.Run.from_env()
    args = TrainingArguments(output_dir=str(huggingface.scratch_dir(run)), save_strategy="no", ...)
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=test)
    huggingface.train(trainer, run)  # resumes, trains; on the checkpoint signal saves, then exits 128 + signal
    metrics = trainer.evaluate()
    run.save_model(trainer.model.save_pretrained)

:func:`train` adds a :class:`SpotrunCallback`, resumes from the run's latest committed checkpoint with
``trainer.train(resume_from_checkpoint=...)``, and exits with :meth:`spotrun.training.Run.exit_for_preemption`
when the callback stopped training for the checkpoint signal. The callback:

- saves at the contract's interval (``SPOTRUN_CHECKPOINT_INTERVAL_STEPS``, the manifest's
  ``checkpoint.interval_steps``) by setting ``control.should_save`` at the step boundary itself, rather than
  through ``save_steps``: the manifest's interval then applies whatever the script's ``TrainingArguments`` say,
  as the contract's directories do. ``save_strategy="no"`` leaves the cadence to spotrun; any save the arguments
  ask for as well goes through the contract in the same way;
- turns the checkpoint signal into save-and-stop at the next step boundary (``control.should_save`` and
  ``control.should_training_stop`` in ``on_step_end``);
- keeps ``Trainer``'s own checkpoint layout (``trainer_state.json``, ``optimizer.pt``, ``scheduler.pt``,
  ``rng_state.pth``, the model's weights and config): ``Trainer`` writes ``checkpoint-N`` into its
  ``output_dir`` (a scratch directory), and in ``on_save`` the complete directory moves into
  ``$SPOTRUN_CHECKPOINT_DIR`` through :meth:`spotrun.training.Run.save_checkpoint`, whose rename is atomic, so
  the agent never sees a half-written checkpoint;
- reports every step reached (:meth:`spotrun.training.Run.report_step`).

To call ``trainer.train`` yourself, give the trainer ``callbacks=[huggingface.callback(run)]``, pass the path of
``run.latest_checkpoint()`` as ``resume_from_checkpoint``, and call ``run.exit_for_preemption()`` when the
callback's ``stopped_for_signal`` is true.

When training begins the callback refuses (:func:`check_arguments`) what would make a resumed run differ: several
processes (under ``torchrun`` the ranks would have to agree on the step at which they stop, which this callback
does not do; ``spotrun.training.pytorch`` does), ``load_best_model_at_end`` and ``save_only_model``.

``transformers`` is imported lazily: spotrun itself never needs it, and the agent copies this module beside
:mod:`spotrun.training` for any interpreter that has ``transformers`` installed.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotrun.training import Run

if TYPE_CHECKING:
    from transformers import Trainer, TrainerCallback
    from transformers.trainer_utils import TrainOutput

SCRATCH_NAME = ".trainer"
"""Under the checkpoint directory, where ``Trainer`` writes before a save moves in (its leading dot hides it)."""


def scratch_dir(run: Run) -> Path:
    """Where ``Trainer`` should write its ``checkpoint-N`` directories: its ``output_dir``.

    It is inside the checkpoint directory, so that moving a finished checkpoint into place is a rename on one
    file system, and its name starts with a dot, so the agent ignores it (only ``step-N`` names are
    checkpoints).

    Parameters
    ----------
    run
        The run.

    Returns
    -------
    Path
        ``run.checkpoint_dir / ".trainer"`` (not created).
    """
    return run.checkpoint_dir / SCRATCH_NAME


def callback(run: Run) -> TrainerCallback:
    """A :class:`SpotrunCallback` for ``run``: pass it to ``Trainer(callbacks=[...])`` to drive the loop yourself.

    Parameters
    ----------
    run
        The run whose checkpoint signal, interval and directory the callback follows.

    Returns
    -------
    TrainerCallback
        The callback; its ``stopped_for_signal`` is true once it stopped training for the checkpoint signal.
    """
    return _callback_class()(run)


def train(trainer: Trainer, run: Run, **train_kwargs: Any) -> TrainOutput:
    """Train under the checkpoint contract: resume, train, and exit if the checkpoint signal stopped training.

    Parameters
    ----------
    trainer
        The trainer; a :class:`SpotrunCallback` for ``run`` is added unless it has one. Its ``output_dir`` is
        where checkpoints are written before they move into the run's checkpoint directory
        (:func:`scratch_dir` is the place for it); leftovers of a save that was killed there are removed first.
    run
        The run (``training.Run.from_env()``).
    **train_kwargs
        Passed on to ``trainer.train``, except ``resume_from_checkpoint``, which this function decides.

    Returns
    -------
    TrainOutput
        What ``trainer.train`` returned, once training has run to its end.

    Raises
    ------
    SystemExit
        With status ``128 + signal number`` after the checkpoint of the step at which the signal stopped
        training is saved (:meth:`spotrun.training.Run.exit_for_preemption`).
    ValueError
        When ``resume_from_checkpoint`` is given.
    """
    if "resume_from_checkpoint" in train_kwargs:
        raise ValueError(
            "train() resumes from the run's latest checkpoint itself; do not pass resume_from_checkpoint"
        )
    spotrun_callback = _callback_for(trainer, run)
    _remove_partial_saves(Path(str(trainer.args.output_dir)))
    latest = run.latest_checkpoint()
    result = trainer.train(resume_from_checkpoint=str(latest.path) if latest else None, **train_kwargs)
    if spotrun_callback.stopped_for_signal:
        print(
            f"spotrun.training.huggingface: checkpoint signal: saved step {trainer.state.global_step}, exiting",
            flush=True,
        )
        run.exit_for_preemption()
    run.flush_progress()
    return result


def check_arguments(args: Any) -> None:
    """Refuse the ``TrainingArguments`` under which the contract's checkpoints would not resume exactly.

    :class:`SpotrunCallback` calls it when training begins.

    Parameters
    ----------
    args
        The trainer's ``TrainingArguments``.

    Raises
    ------
    ValueError
        Naming the argument: several processes (``torchrun``), ``load_best_model_at_end`` or ``save_only_model``.
    """
    if args.world_size > 1:
        raise ValueError(
            f"spotrun.training.huggingface runs one training process, not {args.world_size}: under torchrun the ranks "
            "would not agree on the step to stop at (use spotrun.training.pytorch for several GPUs)"
        )
    if args.load_best_model_at_end:
        raise ValueError(
            "load_best_model_at_end is not supported: checkpoints move into $SPOTRUN_CHECKPOINT_DIR, where only the "
            "newest few are kept, so Trainer could not find the best one at the end (evaluate and save yourself)"
        )
    if args.save_only_model:
        raise ValueError(
            "save_only_model leaves the optimizer, scheduler and RNG states out of each checkpoint, so a resumed "
            "run could not continue exactly; spotrun needs them"
        )


def _callback_for(trainer: Trainer, run: Run) -> Any:
    cls = _callback_class()
    for existing in trainer.callback_handler.callbacks:
        if isinstance(existing, cls):
            if getattr(existing, "run", None) is not run:
                raise ValueError("the trainer's SpotrunCallback follows another Run than the one given")
            return existing
    added = cls(run)
    trainer.add_callback(added)
    return added


def _remove_partial_saves(output_dir: Path) -> None:
    # Every complete save moves out of output_dir at once (on_save), so a checkpoint-N left there is one whose
    # writing was killed; Trainer would write the next save of that step over it, keeping its stale files.
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    if output_dir.is_dir():
        for leftover in output_dir.glob(f"{PREFIX_CHECKPOINT_DIR}-*"):
            shutil.rmtree(leftover, ignore_errors=True)


def _move_contents(source: Path, destination: Path) -> None:
    # A rename when both are on one file system (scratch_dir is); shutil.move copies otherwise.
    for entry in source.iterdir():
        shutil.move(str(entry), str(destination / entry.name))


@functools.cache
def _callback_class() -> type:
    from transformers import TrainerCallback
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    class SpotrunCallback(TrainerCallback):
        """Save at the contract's interval and on its checkpoint signal, into its checkpoint directory.

        Parameters
        ----------
        run
            The run whose signal, interval and checkpoint directory this follows.
        """

        def __init__(self, run: Run) -> None:
            self.run = run
            self.stopped_for_signal = False

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            check_arguments(args)
            if state.global_step:
                # Trainer's own state, restored from the checkpoint: what the log should show a resume is.
                print(f"spotrun.training.huggingface: resumed at global step {state.global_step}", flush=True)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # checkpoint_due also reports the step reached to the agent.
            if self.run.checkpoint_due(state.global_step):
                control.should_save = True
            if self.run.stop_requested and not control.should_training_stop:
                # Training that stops at this step anyway (its last, an early stop) has finished: no preemption.
                control.should_save = True
                control.should_training_stop = True
                self.stopped_for_signal = True

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            source = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            if not state.is_world_process_zero:
                return
            if not source.is_dir():
                raise FileNotFoundError(f"Trainer saved no checkpoint at {source}")
            self.run.save_checkpoint(state.global_step, lambda directory: _move_contents(source, directory))
            # Left when the contract already held this step (written once): it must not linger half-moved.
            shutil.rmtree(source, ignore_errors=True)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.run.flush_progress()

    return SpotrunCallback


def __getattr__(name: str) -> Any:
    # SpotrunCallback subclasses transformers' TrainerCallback, so it exists only once transformers is imported.
    if name == "SpotrunCallback":
        return _callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The checkpoint contract for Hugging Face ``Trainer`` scripts, in one process or as the ranks of ``torchrun``.

:mod:`spotrun.training` is the contract; this module fits it to ``transformers.Trainer`` in one call::

    from transformers import Trainer, TrainingArguments

    from spotrun.training import huggingface

    run = huggingface.run_from_env()  # a training.Run; under torchrun only rank 0 reports progress
    args = TrainingArguments(output_dir=str(huggingface.scratch_dir(run)), save_strategy="no", ...)
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=test)
    huggingface.train(trainer, run)  # resumes, trains; on the checkpoint signal saves, then exits 128 + signal
    metrics = trainer.evaluate()
    if trainer.is_world_process_zero():
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
- reports every step reached (:meth:`spotrun.training.Run.report_step`);
- reports ``Trainer``'s logs as training metrics (:meth:`spotrun.training.Run.report_metrics`) at the step they
  were logged: ``loss``, ``learning_rate``, ``grad_norm``, ``epoch`` and every ``eval_*`` result
  (:func:`spotrun.training.metrics.trainer_metrics`), from global rank 0 only.

Under ``torchrun`` (DDP, one process per GPU, on one node or several) every rank builds the same trainer and
calls :func:`train`, and the ranks work as a group:

- the decisions are collective: at every step boundary one all-reduce (MAX) of two flags, "the checkpoint
  signal reached this rank" and rank 0's "a checkpoint is due", so every rank saves at the same steps and stops
  after the same step, even when the signal reached only some of them (one node warned) or at different
  moments. Rank 0's clock alone decides ``interval_steps: auto``, since only the ranks that write measure saves;
- one checkpoint per step, in ``Trainer``'s own layout: rank 0 writes the model, optimizer, scheduler and
  ``trainer_state.json``, every rank its ``rng_state_<rank>.pth``. After a barrier, each node's local rank 0
  moves what its node wrote into that node's ``$SPOTRUN_CHECKPOINT_DIR``
  (:meth:`~spotrun.training.Run.save_checkpoint`): its node's part of the group checkpoint, which the agent
  uploads; a second barrier keeps every rank until every node's part is in place, so nobody exits in the
  middle of a save;
- the ranks resume from the newest step every node holds whole (:func:`resume_checkpoint`), each from its own
  node's directory: the group checkpoint the agent restored onto every node, never a step of which a node holds
  only its own part (as after torch elastic restarts the workers); one written by another number of processes
  is refused, since its data order and random generators would not continue;
- with three or more processes, :func:`train` makes DDP sum the gradients in rank order
  (:func:`sum_gradients_in_rank_order`): DDP rebuilds its gradient buckets after its first step, so the step
  after a resume would otherwise add three or more ranks' gradients in another order than the uninterrupted
  run (with two, a sum does not depend on its order). It costs an all-gather instead of an all-reduce.

``torchrun`` forwards the checkpoint signal to every worker it started (see :mod:`spotrun.training.pytorch`),
and waits ``--shutdown-timeout`` seconds for them, time enough for the save.

To call ``trainer.train`` yourself, give the trainer ``callbacks=[huggingface.callback(run)]``, pass the path of
:func:`resume_checkpoint` as ``resume_from_checkpoint`` (and, with three or more processes, call
:func:`sum_gradients_in_rank_order` first), and call ``run.exit_for_preemption()`` when the callback's
``stopped_for_signal`` is true.

When training begins the callback refuses (:func:`check_arguments`) what would make a resumed run differ:
``load_best_model_at_end``, ``save_only_model``, ``save_on_each_node`` (the group checkpoint takes each file
from one node), and FSDP and DeepSpeed (whose sharded checkpoints this module does not place).

``transformers`` is imported lazily: spotrun itself never needs it, and the agent copies this module beside
:mod:`spotrun.training` for any interpreter that has ``transformers`` installed.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotrun.training import Run
from spotrun.training.huggingface_ranks import (
    ORDER_FREE_PROCESSES,
    agree,
    resume_checkpoint,
    sum_gradients_in_rank_order,
)
from spotrun.training.metrics import trainer_metrics
from spotrun.training.pytorch_group import process_group, run_from_env

if TYPE_CHECKING:
    from transformers import Trainer, TrainerCallback
    from transformers.trainer_utils import TrainOutput

__all__ = [
    "SCRATCH_NAME",
    "callback",
    "check_arguments",
    "resume_checkpoint",
    "run_from_env",
    "scratch_dir",
    "sum_gradients_in_rank_order",
    "train",
]

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

    Under ``torchrun`` every rank calls it (the ranks agree on what to resume, when to save and when to stop).

    Parameters
    ----------
    trainer
        The trainer; a :class:`SpotrunCallback` for ``run`` is added unless it has one. Its ``output_dir`` is
        where checkpoints are written before they move into the run's checkpoint directory
        (:func:`scratch_dir` is the place for it); leftovers of a save that was killed there are removed first.
    run
        The run (:func:`run_from_env`).
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
    if trainer.is_local_process_zero():
        # One remover per node: every rank's first save comes after the collectives of resume_checkpoint.
        _remove_partial_saves(Path(str(trainer.args.output_dir)))
    latest = resume_checkpoint(run, trainer.args.world_size)
    if trainer.args.world_size > ORDER_FREE_PROCESSES:
        sum_gradients_in_rank_order(trainer)
    result = trainer.train(resume_from_checkpoint=str(latest) if latest else None, **train_kwargs)
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
        Naming the argument: ``load_best_model_at_end``, ``save_only_model``, ``save_on_each_node``, ``fsdp``
        or ``deepspeed``.
    """
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
    if args.save_on_each_node:
        raise ValueError(
            "save_on_each_node is not supported: every node would write the whole checkpoint, and the group's "
            "checkpoint takes each file from one node (rank 0's node writes the state once, every rank its own "
            "rng_state_<rank>.pth, and the agent restores all of it onto every node)"
        )
    for sharded in ("fsdp", "deepspeed"):
        if getattr(args, sharded, None):
            raise ValueError(
                f"{sharded} is not supported: its ranks write sharded checkpoints that spotrun.training.huggingface "
                "does not place in each node's part (use DDP, or spotrun.training.pytorch)"
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

        Under ``torch.distributed`` every rank's callback takes part in the collectives of each step boundary
        and each save.

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
            if state.global_step and state.is_world_process_zero:
                # Trainer's own state, restored from the checkpoint: what the log should show a resume is.
                print(f"spotrun.training.huggingface: resumed at global step {state.global_step}", flush=True)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            # checkpoint_due also reports the step reached to the agent.
            due, stop = agree(self.run.checkpoint_due(state.global_step), self.run.stop_requested)
            if due:
                control.should_save = True
            if stop and not control.should_training_stop:
                # Training that stops at this step anyway (its last, an early stop) has finished: no preemption.
                control.should_save = True
                control.should_training_stop = True
                self.stopped_for_signal = True

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            source = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            group = process_group()
            if group is not None:
                group.barrier()  # every rank of this node has written its files into source
            if state.is_local_process_zero:
                # This node's part: on rank 0's node the whole checkpoint, elsewhere its ranks' generators.
                if not source.is_dir():
                    raise FileNotFoundError(f"Trainer saved no checkpoint at {source}")
                self.run.save_checkpoint(
                    state.global_step, lambda directory: _move_contents(source, directory)
                )
                # Left when the contract already held this step (written once): it must not linger half-moved.
                shutil.rmtree(source, ignore_errors=True)
            if group is not None:
                group.barrier()  # every node's part is in place before any rank trains on or exits

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
        ) -> None:
            # Trainer calls every rank's callbacks; rank 0's run alone has the metrics file (Run.from_env).
            values = trainer_metrics(logs or {})
            if values and state.is_world_process_zero:
                self.run.report_metrics(state.global_step, values)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.run.flush_progress()

    return SpotrunCallback


def __getattr__(name: str) -> Any:
    # SpotrunCallback subclasses transformers' TrainerCallback, so it exists only once transformers is imported.
    if name == "SpotrunCallback":
        return _callback_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The ranks of a Hugging Face ``Trainer`` under ``torchrun``: what they agree on, and how they resume exactly.

Part of :mod:`spotrun.training.huggingface`, which calls these at each step boundary, save and start. ``torch``,
``accelerate`` and ``transformers`` are imported only when a function runs; the agent copies this module beside
:mod:`spotrun.training`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spotrun.training import Run
from spotrun.training.pytorch_group import any_ranks, process_group

if TYPE_CHECKING:
    from transformers import Trainer

ORDER_FREE_PROCESSES = 2
"""Up to this many processes DDP's own gradient sum resumes exactly (a sum of two does not depend on its order)."""


def resume_checkpoint(run: Run, world_size: int = 1) -> Path | None:
    """The checkpoint every rank resumes from: the newest one every node holds whole, or None on a fresh start.

    A checkpoint is whole on a node when it holds ``Trainer``'s state (``trainer_state.json``, which rank 0's
    node writes): the group checkpoint the agent restores onto every node before it starts the group. A step a
    node only saved its own part of (the generators of its ranks) is skipped, as when torch elastic restarts the
    workers after a failure without a restore. Under ``torch.distributed`` a collective: the ranks gather the
    steps each holds whole and take the newest they all hold, each from its own node's checkpoint directory.

    Parameters
    ----------
    run
        The run.
    world_size
        The number of training processes (``TrainingArguments.world_size``).

    Returns
    -------
    Path or None
        The checkpoint directory to pass as ``resume_from_checkpoint``.

    Raises
    ------
    RuntimeError
        When the checkpoint was written by another number of processes.
    """
    group = process_group()
    # trainer_state.json: Trainer's TRAINER_STATE_NAME, written on rank 0's node only.
    whole = {
        checkpoint.step: checkpoint.path
        for checkpoint in run.checkpoints()
        if (checkpoint.path / "trainer_state.json").is_file()
    }
    common = set(whole)
    if group is not None:
        every: list[Any] = [None] * group.get_world_size()
        group.all_gather_object(every, sorted(whole))
        common = common.intersection(*every)
    latest = run.latest_checkpoint()
    step = max(common, default=None)
    if latest is not None and latest.step != step and (group is None or group.get_rank() == 0):
        print(
            f"spotrun.training.huggingface: {latest.path.name} is not whole on every node (a node holds only its "
            f"own part of it); resuming from {'the start' if step is None else whole[step].name}",
            flush=True,
        )
    if step is None:
        return None
    _check_processes(whole[step], world_size)
    return whole[step]


def sum_gradients_in_rank_order(trainer: Trainer) -> None:
    """Make the ``DistributedDataParallel`` wrapper the trainer builds sum gradients in rank order.

    ``Trainer`` wraps the model in DDP when training starts, through ``accelerate``, which then calls its DDP
    handler's ``register_comm_hook``: this replaces the handler (keeping its DDP arguments) with one that
    registers :func:`spotrun.training.pytorch_ddp.ordered_gradient_sum`.
    :func:`spotrun.training.huggingface.train` calls it for three or more processes; call it before
    ``trainer.train`` when you drive the loop yourself.

    Parameters
    ----------
    trainer
        The trainer, before it trains.

    Raises
    ------
    ValueError
        When the trainer's DDP arguments already ask for a communication hook of their own.
    """
    import dataclasses

    from accelerate.utils import DistributedDataParallelKwargs

    handler = trainer.accelerator.ddp_handler or DistributedDataParallelKwargs()
    if isinstance(handler, _rank_ordered_handler_class()):
        return
    if handler.comm_hook != type(handler).comm_hook:
        raise ValueError(
            f"the trainer's DDP communication hook {handler.comm_hook} would replace the rank-ordered gradient sum "
            "that an exact resume of three or more processes needs"
        )
    fields = {field.name: getattr(handler, field.name) for field in dataclasses.fields(handler)}
    trainer.accelerator.ddp_handler = _rank_ordered_handler_class()(**fields)


@functools.cache
def _rank_ordered_handler_class() -> type:
    from accelerate.utils import DistributedDataParallelKwargs

    from spotrun.training.pytorch_ddp import ordered_gradient_sum

    class RankOrderedGradientSum(DistributedDataParallelKwargs):
        def register_comm_hook(self, model: Any) -> None:
            ordered_gradient_sum(model)

    return RankOrderedGradientSum


def agree(due: bool, stop: bool) -> tuple[bool, bool]:
    """The group's decisions at a step boundary: save (rank 0's ``due``) and stop (any rank's ``stop``).

    A collective under ``torch.distributed``: every rank calls it at every step boundary
    (:func:`spotrun.training.pytorch_group.any_ranks`, one all-reduce of two integers). Only rank 0's interval
    counts, as only the ranks that write measure a save's time (``interval_steps: auto``). Alone, it returns its
    arguments.

    Parameters
    ----------
    due
        Whether this rank's run says a checkpoint is due.
    stop
        Whether the checkpoint signal reached this rank.

    Returns
    -------
    tuple[bool, bool]
        ``(save, stop)``, the same on every rank.
    """
    group = process_group()
    save, stop = any_ranks(group, [due and (group is None or group.get_rank() == 0), stop])
    return save, stop


def _check_processes(checkpoint: Path, world_size: int) -> None:
    # Trainer names the generators' file by rank under several processes, and loads none (only logging it)
    # when this rank's is missing: a resume that would silently not continue exactly.
    names = {path.name for path in checkpoint.glob("rng_state*.pth")}
    written = 1 if names == {"rng_state.pth"} else len(names)
    expected = (
        {"rng_state.pth"} if world_size == 1 else {f"rng_state_{rank}.pth" for rank in range(world_size)}
    )
    if names != expected:
        raise RuntimeError(
            f"{checkpoint.name} was written by {written} training process(es), this run has {world_size}: its data "
            "order and random generators would not continue (run it with the number of processes that saved it)"
        )

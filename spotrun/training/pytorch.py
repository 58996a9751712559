"""PyTorch on the checkpoint contract: save and resume everything a run needs to continue exactly.

:class:`TorchCheckpointer` puts a PyTorch training loop on :class:`spotrun.training.Run`: the model, optimizer,
LR scheduler and grad scaler, the random number generators (Python's ``random``, NumPy's global one when NumPy
is importable, torch's CPU generator and every CUDA device's) and the position in the data (epoch, batch within
the epoch, global step) go into one atomic checkpoint, and a resumed run continues as if it had never stopped::

    import torch
    from spotrun.training import pytorch

    run = pytorch.run_from_env()  # a training.Run; under torchrun only rank 0 reports progress
    model, optimizer = build_model(), build_optimizer()
    loader = pytorch.resumable_loader(dataset, batch_size=32, shuffle=True, num_workers=2, seed=seed)
    checkpointer = pytorch.TorchCheckpointer(run, model, optimizer, scheduler, loaders={"train": loader})
    position = checkpointer.resume()  # Position(step=0, epoch=0, batch=0) on a fresh start
    while position.epoch < epochs:
        for batch in loader:  # a resumed epoch continues with the batch after the last one trained
            train_one_batch(batch)
            position = position.advance(len(loader))
            checkpointer.step_done(position)  # checkpoints when due or when stopping; exits after the latter
    run.save_model(lambda path: save_weights(model, path))

The loader (:mod:`spotrun.training.pytorch_data`) is a torchdata ``StatefulDataLoader`` with a generator of its own,
whose position in the epoch goes into every checkpoint, and whose workers survive the checkpoint signal; a loop
that indexes the data itself can use :func:`epoch_order` instead.

Under ``torchrun`` (DDP, one process per GPU) every rank builds the same checkpointer, and it works as a group:

- the stop decision is collective: :meth:`TorchCheckpointer.should_stop` all-reduces every rank's
  ``stop_requested`` with MAX at each step boundary, so all ranks stop after the same step, even when the
  checkpoint signal reached them at different moments;
- one checkpoint per step: every rank's RNG state is gathered to rank 0, which writes the checkpoint through
  :meth:`spotrun.training.Run.save_checkpoint` (a temporary directory renamed when complete, so it is never
  seen half-written); the others wait at a barrier, so nobody runs ahead of a save or exits before it ends;
- on several nodes, every node has a part of each checkpoint: rank 0's node the state, and local rank 0 of each
  other node (torchrun's ``GROUP_RANK`` > 0, ``LOCAL_RANK`` 0) a small ``node-<k>.json`` in its own checkpoint
  directory. Each node's agent uploads its node's part, and the checkpoint counts once every node's part is
  uploaded; the agent then restores the whole checkpoint onto every node, and :meth:`TorchCheckpointer.resume`
  reads it from each node's own directory.

Which rank saves what: DDP keeps the model, the optimizer and the rest replicated on every rank, so by default
rank 0 saves that state once (with every rank's generators and loader positions, which are each rank's own) and
the other nodes' parts only say that the node reached the step: one small file each, and a checkpoint that
``torch.load`` reads anywhere. FSDP, whose ranks each hold a shard, cannot be saved by rank 0 alone:
``TorchCheckpointer(..., sharded=True)`` saves the model's and the optimizer's state with
``torch.distributed.checkpoint`` (DCP), each rank its own shards into its node's directory
(:mod:`spotrun.training.pytorch_sharded`), so a node uploads only its ranks' shards and a resumed rank reads the
pieces it needs from its node's copy.

On the way the checkpoint signal travels: the agent signals the command's leader only (SIGKILL goes to its
group once it has exited or overrun its grace); ``torchrun`` (its elastic agent) starts its workers in sessions
of their own and forwards the signal (``SIGTERM``, ``SIGINT``, ``SIGHUP``, ``SIGQUIT``) to each worker's whole
process group with ``os.killpg``, then waits ``--shutdown-timeout`` seconds (30 by default) before killing them:
time enough for a save. A :func:`resumable_loader`'s workers leave that group when they start, so the signal
does not kill them in the middle of the rank's save.

``torch`` is imported only when a function here runs, so ``import spotrun.training.pytorch`` works anywhere; the
agent copies this module beside :mod:`spotrun.training` so that any interpreter running the command finds it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spotrun import training
from spotrun.model import layout
from spotrun.training.pytorch_data import check_loader, resumable_loader
from spotrun.training.pytorch_group import (
    any_rank,
    any_ranks,
    node_directory,
    process_group,
    rank,
    run_from_env,
    writes_node_directory,
)
from spotrun.training.pytorch_position import Position, epoch_order
from spotrun.training.pytorch_rng import capture_rng, restore_rng
from spotrun.training.pytorch_sharded import load_shards, save_shards

__all__ = ["Position", "TorchCheckpointer", "epoch_order", "rank", "resumable_loader", "run_from_env"]

STATE_FILE = (
    "state.pt"  # position, scheduler, scaler (and unsharded, model and optimizer): the same on every rank
)
NODE_FILE = "node-{node:03d}.json"  # a node's part of a multi-node checkpoint, written by its local rank 0
RNG_FILE = "rng.pt"  # every rank's generators, a list indexed by rank
LOADERS_FILE = "loaders.pt"  # every rank's data loaders' states, a list indexed by rank (with ``loaders=``)
_FORMAT = 1


def _unwrapped(model: Any) -> Any:
    # DistributedDataParallel (and DataParallel) keep the user's module as .module; its state dict has no prefix.
    return getattr(model, "module", model)


class TorchCheckpointer:
    """Saves and resumes a PyTorch run exactly, alone or as one rank of a ``torchrun`` group.

    Parameters
    ----------
    run
        The checkpoint contract (:func:`run_from_env`).
    model
        The model, or its ``DistributedDataParallel`` wrapper (the wrapped module's state is saved).
    optimizer
        Its optimizer; None: none saved.
    scheduler
        An LR scheduler (anything with ``state_dict``/``load_state_dict``); None: none.
    scaler
        A ``torch.amp.GradScaler``; None: none.
    extra
        More objects with ``state_dict``/``load_state_dict`` (a stateful sampler, an EMA), by name.
    loaders
        Data loaders by name, each a :func:`resumable_loader` (or a ``StatefulDataLoader`` with a
        ``generator=`` of its own); each rank's position in its epoch is saved, and restored by
        :meth:`resume`.
    sharded
        Save the model's and the optimizer's state with ``torch.distributed.checkpoint``, each rank its own
        shards (:mod:`spotrun.training.pytorch_sharded`): for FSDP, whose ranks each hold a shard, or any model
        too large for rank 0 to write alone. Off: rank 0 writes the whole (replicated, under DDP) state.
    """

    def __init__(
        self,
        run: training.Run,
        model: Any,
        optimizer: Any = None,
        scheduler: Any = None,
        scaler: Any = None,
        extra: dict[str, Any] | None = None,
        loaders: dict[str, Any] | None = None,
        *,
        sharded: bool = False,
    ):
        self.run = run
        self.model = model
        self.sharded = sharded
        self.optimizer = optimizer
        # torchrun's: this process's node in the group and its rank on the node (0 and 0 without torchrun).
        self.node = int(os.environ.get("GROUP_RANK") or 0)
        self.local_rank = int(os.environ.get("LOCAL_RANK") or 0)
        self.resumed_from: Path | None = None
        self.loaders = dict(loaders or {})
        for name, loader in self.loaders.items():
            check_loader(name, loader)
        self.stateful: dict[str, Any] = {
            name: item
            for name, item in (("optimizer", optimizer), ("scheduler", scheduler), ("scaler", scaler))
            # Sharded, the optimizer's state goes with the model's shards.
            if item is not None and not (sharded and name == "optimizer")
        }
        for name, item in (extra or {}).items():
            if name in self.stateful or name in ("model", "optimizer", "position", "format", "sharded"):
                raise ValueError(f"extra state name {name!r} is taken")
            self.stateful[name] = item

    # -- the group --------------------------------------------------------------------------

    def should_stop(self) -> bool:
        """Whether to save and exit now: any rank's :attr:`~spotrun.training.Run.stop_requested`.

        A collective under ``torch.distributed``: every rank must call it at the same step boundary (once per
        step is cheap: one all-reduce of one integer). Alone, it is ``run.stop_requested``.
        """
        return any_rank(process_group(), self.run.stop_requested)

    # -- saving -----------------------------------------------------------------------------

    def _state(self, position: Position) -> dict[str, Any]:
        state = {
            "format": _FORMAT,
            "position": tuple(position),
            "sharded": self.sharded,
            **{name: item.state_dict() for name, item in self.stateful.items()},
        }
        if not self.sharded:
            state["model"] = _unwrapped(self.model).state_dict()
        return state

    def save(self, position: Position) -> Path | None:
        """Write the checkpoint of ``position`` (named by ``position.step``), atomically.

        Under ``torch.distributed`` every rank calls it at the same step: the RNG states are gathered to rank
        0, which writes, and everyone waits at a barrier until the checkpoint is complete. Sharded, every rank
        also writes its shards into its node's directory before that directory is renamed into place.

        Parameters
        ----------
        position
            Where the run is.

        Returns
        -------
        Path or None
            The checkpoint directory on rank 0 (and alone); None on the other ranks.
        """
        import torch

        dist = process_group()
        # This rank's own: its generators, and where its loaders are in their epoch.
        mine = (capture_rng(), {name: loader.state_dict() for name, loader in self.loaders.items()})
        if dist is None:
            every_rank = [mine]
        else:
            gathered: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
            dist.gather_object(mine, gathered, dst=0)
            every_rank = gathered or []
        writer = writes_node_directory(dist, self.node, self.local_rank)
        final = self.run.checkpoint_dir / layout.checkpoint_name(position.step)
        # A step's checkpoint is written once (Run.save_checkpoint keeps one that exists): sharded, every rank
        # must know that before the collective write, or the others would wait for a writer that never writes.
        if self.sharded and any_rank(dist, writer and final.is_dir()):
            if dist is not None:
                dist.barrier()
            return final if dist is None or dist.get_rank() == 0 else None
        rank_0 = dist is None or dist.get_rank() == 0
        state = self._state(position) if rank_0 else None
        world = 1 if dist is None else dist.get_world_size()
        part = {"node": self.node, "step": position.step, "world_size": world}

        def write(directory: Path) -> None:
            if rank_0:
                torch.save(state, directory / STATE_FILE)
                torch.save([rng for rng, _ in every_rank], directory / RNG_FILE)
                if self.loaders:
                    torch.save([loaders for _, loaders in every_rank], directory / LOADERS_FILE)
            else:
                # This node's part: its agent uploads it, and the group's checkpoint counts once every node's is.
                (directory / NODE_FILE.format(node=self.node)).write_text(json.dumps(part))
            if self.sharded:
                save_shards(node_directory(dist, self.node, directory), self.model, self.optimizer)

        written: Path | None = None
        if writer:
            path = self.run.save_checkpoint(position.step, write)
            written = path if rank_0 else None
        elif self.sharded:
            save_shards(node_directory(dist, self.node, None), self.model, self.optimizer)
        if dist is not None:
            dist.barrier()
        return written

    def step_done(self, position: Position) -> bool:
        """End a step: checkpoint when one is due (on rank 0's schedule) or any rank was asked to stop, then exit
        if one was. A collective under ``torch.distributed``: one all-reduce of two flags.

        Parameters
        ----------
        position
            Where the run is after the step.

        Returns
        -------
        bool
            True when a checkpoint was written. Never returns after a stop: the process exits with
            :meth:`spotrun.training.Run.exit_for_preemption`.
        """
        dist = process_group()
        # Every rank reports its step (only rank 0 has a progress file); rank 0's schedule decides for all: a
        # time-based interval (checkpoint.interval_steps auto) may fall due on one rank's clock and not on
        # another's, and the save is a collective every rank must enter.
        due = self.run.checkpoint_due(position.step)
        stop, due = any_ranks(dist, [self.run.stop_requested, due and (dist is None or dist.get_rank() == 0)])
        if due or stop:
            self.save(position)
        if stop:
            self.run.exit_for_preemption()
        return due

    # -- resuming ---------------------------------------------------------------------------

    def resume(self, map_location: Any = None) -> Position:
        """Load the newest complete checkpoint, if any, into every object; return where to continue.

        Under ``torch.distributed`` rank 0 chooses the checkpoint (so all ranks load the same one), each rank
        reads it from its own node's checkpoint directory, and a barrier at the end keeps rank 0 from pruning it
        before everyone has read it. :attr:`resumed_from` is then the directory read (None: a fresh start).

        Parameters
        ----------
        map_location
            Passed to ``torch.load`` (e.g. the rank's CUDA device); by default tensors go where they were.

        Returns
        -------
        Position
            The checkpoint's position; ``Position()`` on a fresh start.

        Raises
        ------
        RuntimeError
            When the checkpoint was written by another number of ranks (its generators cannot be shared out), or
            this node's directory lacks the checkpoint rank 0 chose.
        """
        import torch

        dist = process_group()
        latest = self.run.latest_checkpoint()
        # Its name, not its path: each node has a copy, and on another node the directory may be elsewhere.
        chosen = None if latest is None else latest.path.name
        if dist is not None:
            box = [chosen]
            dist.broadcast_object_list(box, src=0)
            chosen = box[0]
        position = Position()
        if chosen is not None:
            directory = self.run.checkpoint_dir / chosen
            if not (directory / STATE_FILE).is_file():
                raise RuntimeError(
                    f"rank 0 resumes {chosen}, which this node's {self.run.checkpoint_dir} does not hold whole"
                )
            self.resumed_from = directory
            state = torch.load(directory / STATE_FILE, map_location=map_location, weights_only=True)
            if bool(state.get("sharded", False)) != self.sharded:
                saved = "sharded" if state.get("sharded") else "not sharded"
                raise RuntimeError(
                    f"{chosen} was saved {saved}: build the checkpointer with sharded={not self.sharded}"
                )
            every_rng = torch.load(directory / RNG_FILE, weights_only=True)
            world = 1 if dist is None else dist.get_world_size()
            if len(every_rng) != world:
                raise RuntimeError(
                    f"{directory.name} was written by {len(every_rng)} rank(s), this run has {world}"
                )
            if self.sharded:
                load_shards(directory, self.model, self.optimizer)
            else:
                _unwrapped(self.model).load_state_dict(state["model"])
            for name, item in self.stateful.items():
                item.load_state_dict(state[name])
            me = 0 if dist is None else dist.get_rank()
            restore_rng(every_rng[me])
            if self.loaders:
                self._resume_loaders(directory, me)
            position = Position(*state["position"])
        if dist is not None:
            dist.barrier()
        return position

    def _resume_loaders(self, directory: Path, me: int) -> None:
        import torch

        path = directory / LOADERS_FILE
        if not path.is_file():
            raise RuntimeError(f"{directory.name} holds no data loader state: it was saved without loaders=")
        mine = torch.load(path, weights_only=True)[me]
        for name, loader in self.loaders.items():
            if name not in mine:
                raise RuntimeError(f"{directory.name} holds no state of the data loader {name!r}")
            loader.load_state_dict(mine[name])


def save_safetensors(model: Any) -> Callable[[Path], None]:
    """A writer for :meth:`spotrun.training.Run.save_model`: the model's weights as safetensors.

    The file is a JSON header (sorted names, dtypes, shapes) and the raw tensors: identical weights give
    identical bytes whatever wrote them, so two runs compare by checksum (a ``torch.save`` zip also carries a
    serialization id and an archive layout that belong to the torch version).

    Parameters
    ----------
    model
        The model (or its DDP wrapper).

    Returns
    -------
    Callable
        Writes the file at the path it is given.
    """

    def write(path: Path) -> None:
        from safetensors.torch import save

        weights = _unwrapped(model).state_dict().items()
        path.write_bytes(save({name: tensor.detach().cpu().contiguous() for name, tensor in weights}))

    return write

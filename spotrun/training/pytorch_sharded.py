"""Sharded model and optimizer state through ``torch.distributed.checkpoint`` (DCP), for
:class:`spotrun.training.pytorch.TorchCheckpointer` with ``sharded=True`` (a training helper beside it).

Each rank writes only what it holds (a shard of an FSDP model, or its share of a replicated DDP one, which DCP
spreads over the ranks): ``__<rank>_<n>.distcp`` files, and rank 0 the ``.metadata`` that maps them. Every rank
writes into its own node's checkpoint directory, so each node's part of a multi-node checkpoint is its ranks'
shards, and no two nodes write a file of the same name. A resumed rank reads from its own node's copy of the
whole checkpoint (the agent restores every node's part onto every node), taking the pieces its shards need.

``get_state_dict``/``set_state_dict`` (``torch.distributed.checkpoint.state_dict``) give the model's and the
optimizer's state in the form DCP reshards: ``DistributedDataParallel``'s prefix dropped, FSDP's shards as
``DTensor``s, the optimizer's state keyed by parameter name and created first if the optimizer has not stepped.

``torch`` is imported only when a function here runs; the agent copies this module beside :mod:`spotrun.training`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["load_shards", "save_shards"]


def save_shards(directory: Path, model: Any, optimizer: Any = None) -> None:
    """Write this rank's shards of the model's (and the optimizer's) state into ``directory``.

    A collective under ``torch.distributed``: every rank calls it at once, each with its node's directory.

    Parameters
    ----------
    directory
        The checkpoint directory being written on this rank's node.
    model
        The model (plain, ``DistributedDataParallel`` or FSDP).
    optimizer
        Its optimizer; None: the model only.
    """
    import torch.distributed.checkpoint as dcp

    dcp.save(_state_dicts(model, optimizer), checkpoint_id=directory, no_dist=not _in_group())


def load_shards(directory: Path, model: Any, optimizer: Any = None) -> None:
    """Load the model's (and the optimizer's) state from a checkpoint :func:`save_shards` wrote.

    A collective under ``torch.distributed``, like :func:`save_shards`.

    Parameters
    ----------
    directory
        This node's copy of the whole checkpoint.
    model
        The model, built and wrapped as when it was saved.
    optimizer
        Its optimizer; None: the model only.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    state = _state_dicts(model, optimizer)
    # In place, into the tensors (and shards) the rank holds.
    dcp.load(state, checkpoint_id=directory, no_dist=not _in_group())
    if optimizer is None:
        set_model_state_dict(model, state["model"])
    else:
        set_state_dict(
            model, [optimizer], model_state_dict=state["model"], optim_state_dict=state["optimizer"]
        )


def _state_dicts(model: Any, optimizer: Any) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if optimizer is None:
        return {"model": get_model_state_dict(model)}
    model_state, optimizer_state = get_state_dict(model, [optimizer])
    return {"model": model_state, "optimizer": optimizer_state}


def _in_group() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()

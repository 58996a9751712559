"""Who does what in a ``torchrun`` group, for :class:`spotrun.training.pytorch.TorchCheckpointer` (a training helper
beside it): the collectives it needs beyond ``torch.distributed``'s own, and which process writes each node's
checkpoint directory.

``torch`` is imported only when a function here runs; the agent copies this module beside :mod:`spotrun.training`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from spotrun import training

__all__ = [
    "any_rank",
    "any_ranks",
    "node_directory",
    "process_group",
    "rank",
    "run_from_env",
    "writes_node_directory",
]


def rank() -> int:
    """This process's rank in the default process group (0 without one)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def run_from_env(**kwargs: Any) -> training.Run:
    """:meth:`spotrun.training.Run.from_env`, for one of several ranks.

    Only rank 0 (``RANK`` as ``torchrun`` sets it; 0 when unset) reports progress: the progress file has one
    writer. Every rank handles the checkpoint signal.

    Parameters
    ----------
    **kwargs
        Passed on to :meth:`spotrun.training.Run.from_env`.

    Returns
    -------
    spotrun.training.Run
        The run.
    """
    environ = dict(kwargs.pop("environ", None) or os.environ)
    if int(environ.get("RANK", "0")) != 0:
        environ.pop(training.ENV_PROGRESS_FILE, None)
    return training.Run.from_env(environ, **kwargs)


def process_group() -> Any:
    """``torch.distributed`` when this process is in a process group, else None (it runs alone)."""
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def _device(dist: Any) -> Any:
    import torch

    # NCCL collectives need CUDA tensors, on the device this rank drives; gloo works on CPU ones.
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def any_rank(dist: Any, value: bool) -> bool:
    """Whether ``value`` is true on any rank: one all-reduce (MAX) of one integer; ``value`` alone.

    Parameters
    ----------
    dist
        :func:`process_group`'s answer.
    value
        This rank's.

    Returns
    -------
    bool
        The group's answer, the same on every rank.
    """
    return any_ranks(dist, [value])[0]


def any_ranks(dist: Any, values: list[bool]) -> list[bool]:
    """:func:`any_rank` of several flags at once, in one all-reduce."""
    if dist is None:
        return list(values)
    import torch

    flags = torch.tensor([int(value) for value in values], dtype=torch.int32, device=_device(dist))
    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return [bool(flag) for flag in flags.tolist()]


def writes_node_directory(dist: Any, node: int, local_rank: int) -> bool:
    """Whether this process writes its node's checkpoint directory: rank 0 on node 0, local rank 0 on the others.

    Parameters
    ----------
    dist
        :func:`process_group`'s answer (None: the process runs alone, and writes).
    node, local_rank
        torchrun's ``GROUP_RANK`` and ``LOCAL_RANK`` (0 and 0 without torchrun: every rank is on node 0).

    Returns
    -------
    bool
        True for one process per node.
    """
    if dist is None:
        return True
    return bool(dist.get_rank() == 0) if node == 0 else local_rank == 0


def node_directory(dist: Any, node: int, directory: Path | None) -> Path:
    """The directory this node's writer is filling, on every rank of the node: the writer says it to all.

    A collective under ``torch.distributed`` (an all-gather of one small object).

    Parameters
    ----------
    dist
        :func:`process_group`'s answer.
    node
        This process's node.
    directory
        The directory, on the node's writer (:func:`writes_node_directory`); None on the other ranks.

    Returns
    -------
    Path
        The node's directory.
    """
    if dist is None:
        assert directory is not None
        return directory
    entries: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(entries, (node, None if directory is None else str(directory)))
    return next(Path(path) for owner, path in entries if owner == node and path is not None)

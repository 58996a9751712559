"""Checkpoints as the jobs bucket holds them: the commit marker's content and the grouping of keys by step.

A checkpoint is the sub-prefix ``jobs/<job>/checkpoints/step-<012d>/``; it counts only once its commit marker
(``_COMMITTED.json``) exists. The agent writes and restores checkpoints (:mod:`spotrun.agent.checkpoint_store`); the
control plane reads which steps were committed. Both read the layout from here.

A multi-node job's checkpoint is a group's: each node uploads the files its local checkpoint directory holds for
the step, then its part marker (``_PARTS/node-<k>.json``, a :class:`PartMarker`); the commit marker is written
once every node's part of the same attempt is there (:func:`group_commit_files`), and lists every node's files.
So a group checkpoint missing a node's part is never committed, hence never listed as committed nor restored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from spotrun.model import layout
from spotrun.model.base import DeferredModel


class CheckpointFile(DeferredModel):
    """One file of a checkpoint, as listed by its commit marker."""

    path: str  # relative to the checkpoint directory, with "/" separators
    size: int
    sha256: str


class CommitMarker(DeferredModel):
    """The content of ``_COMMITTED.json``."""

    format: Literal["spotrun-checkpoint/v1"] = "spotrun-checkpoint/v1"
    job_id: str
    step: int
    attempt: int | None = None
    files: list[CheckpointFile]
    bytes: int
    committed_at: str
    nodes: int = 1  # the group's nodes, each of which uploaded its part


class PartMarker(DeferredModel):
    """The content of ``_PARTS/node-<k>.json``: the files one node of a group uploaded for a checkpoint."""

    format: Literal["spotrun-checkpoint-part/v1"] = "spotrun-checkpoint-part/v1"
    job_id: str
    step: int
    node: int
    nodes: int
    attempt: int
    files: list[CheckpointFile]
    bytes: int


class PartConflictError(ValueError):
    """Two nodes' parts hold the same path with different content: the group checkpoint is not consistent."""


def missing_parts(parts: Mapping[int, PartMarker], nodes: int, attempt: int) -> list[int]:
    """The nodes whose part of a group checkpoint is not there for ``attempt``.

    Parameters
    ----------
    parts
        The part markers found, by node.
    nodes
        The group's nodes.
    attempt
        The attempt committing: a part an earlier attempt left for the same step is from another run of the
        group (its node may have trained that step from another checkpoint) and counts as missing.

    Returns
    -------
    list[int]
        The nodes still missing, in order; empty when the checkpoint can be committed.
    """
    return [
        node
        for node in range(nodes)
        if (part := parts.get(node)) is None or part.attempt != attempt or part.nodes != nodes
    ]


def group_commit_files(parts: Mapping[int, PartMarker], nodes: int, attempt: int) -> list[CheckpointFile]:
    """Every file of a complete group checkpoint, for its commit marker.

    Parameters
    ----------
    parts, nodes, attempt
        As :func:`missing_parts`: the part markers found by node, the group's nodes, the attempt committing.

    Returns
    -------
    list[CheckpointFile]
        The files of every node's part, sorted by path; a path two nodes uploaded with the same bytes once.

    Raises
    ------
    ValueError
        When a node's part is missing (:func:`missing_parts`).
    PartConflictError
        When two nodes uploaded the same path with different bytes: the object S3 holds is one of them, and
        either way the checkpoint is not what every node saved.
    """
    missing = missing_parts(parts, nodes, attempt)
    if missing:
        raise ValueError(f"the parts of nodes {missing} are missing")
    files: dict[str, CheckpointFile] = {}
    for node in range(nodes):
        for entry in parts[node].files:
            known = files.setdefault(entry.path, entry)
            if known.sha256 != entry.sha256:
                raise PartConflictError(
                    f"step {parts[node].step}: nodes wrote {entry.path!r} with different content; each node "
                    "must write its own file names"
                )
    return [files[path] for path in sorted(files)]


@dataclass(frozen=True)
class RemoteCheckpoint:
    """What S3 holds under one checkpoint sub-prefix."""

    step: int
    prefix: str
    committed: bool
    keys: tuple[str, ...]


@dataclass(frozen=True)
class CommittedCheckpoint:
    """A checkpoint whose commit marker exists."""

    step: int
    prefix: str  # key prefix in the jobs bucket, ending with "/"


def group_checkpoint_keys(job_id: str, keys: Iterable[str]) -> list[RemoteCheckpoint]:
    """Group the keys under a job's checkpoints prefix by checkpoint, oldest first.

    Parameters
    ----------
    job_id
        The job.
    keys
        Keys under :func:`spotrun.model.layout.checkpoints_prefix`; keys not inside a ``step-*`` sub-prefix are
        ignored.

    Returns
    -------
    list[RemoteCheckpoint]
        One entry per step, ``committed`` when the step's marker is among the keys.
    """
    root = layout.checkpoints_prefix(job_id)
    grouped: dict[int, list[str]] = {}
    for key in keys:
        name, separator, _ = key.removeprefix(root).partition("/")
        step = layout.checkpoint_step(name)
        if key.startswith(root) and separator and step is not None:
            grouped.setdefault(step, []).append(key)
    return [
        RemoteCheckpoint(
            step=step,
            prefix=layout.checkpoint_prefix(job_id, step),
            committed=layout.commit_marker_key(job_id, step) in step_keys,
            keys=tuple(sorted(step_keys)),
        )
        for step, step_keys in sorted(grouped.items())
    ]


def select_prunable(checkpoints: list[RemoteCheckpoint], keep_last: int) -> list[RemoteCheckpoint]:
    """Choose what pruning deletes: committed checkpoints beyond the newest ``keep_last``, and uncommitted
    leftovers older than the oldest one kept.

    Uncommitted checkpoints newer than that may be an upload in progress and are left alone.

    Parameters
    ----------
    checkpoints
        As returned by :func:`group_checkpoint_keys`.
    keep_last
        Committed checkpoints to keep (at least 1).

    Returns
    -------
    list[RemoteCheckpoint]
        The checkpoints to delete, oldest first.
    """
    if keep_last < 1:
        raise ValueError("keep_last must be at least 1")
    committed = sorted(c.step for c in checkpoints if c.committed)
    if not committed:
        return []
    kept = set(committed[-keep_last:])
    oldest_kept = min(kept)
    return [c for c in checkpoints if c.step not in kept and (c.committed or c.step < oldest_kept)]

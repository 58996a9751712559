"""GPU health in the job record: each node's latest sample, the first sign of memory running out, and idleness.

Each heartbeat of a node's agent carries its latest ``nvidia-smi`` sample (:class:`GpuLine`). The record keeps it
on the attempt's node, but a record write is a DynamoDB write of the whole item, and heartbeats come every
minute from every node: so a sample is written only when the node has none yet, when the stored one is older
than :data:`GPU_SAMPLE_REFRESH_SECONDS` (time-scaled in the emulator), or when it is the node's first reading of
a GPU's memory above :data:`~spotrun.model.job.telemetry.GPU_MEMORY_HIGH_PERCENT` in the attempt
(:class:`GpuMemoryHigh`, kept for the attempt, before the out-of-memory error it announces). The full series,
every sample, is the job's telemetry (:mod:`spotrun.model.job.telemetry`).

When a node's GPUs stayed idle for the manifest's ``training.gpu_idle`` (:mod:`spotrun.model.manifest.gpu_idle`),
its agent reports ``Training.Idle`` with an :class:`IdleCause`; :func:`idle_message` says it in the record.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Final

from pydantic import Field, ValidationError

from spotrun.model.base import DeferredModel, RecordModel
from spotrun.model.job.telemetry import GPU_MEMORY_HIGH_PERCENT, GpuLine
from spotrun.model.manifest.gpu_idle import GpuIdlePolicy

GPU_SAMPLE_REFRESH_SECONDS: Final = 300.0
"""How old a node's stored sample may grow before a heartbeat's replaces it (AWS's seconds; scaled locally)."""


class GpuMemoryHigh(RecordModel):
    """A node's first reading of a GPU's memory above :data:`GPU_MEMORY_HIGH_PERCENT` in an attempt."""

    at: datetime = Field(description="When the sample was taken (the agent's clock).")
    node: int = Field(ge=0, description="The node of the attempt.")
    gpu: int = Field(ge=0, description="The GPU's index on its node (the fullest one of the sample).")
    percent: float = Field(description="Its memory used, percent of its memory.")


def memory_high(line: GpuLine, node: int) -> GpuMemoryHigh | None:
    """The sample's fullest GPU when its memory is above :data:`GPU_MEMORY_HIGH_PERCENT`; None otherwise.

    Parameters
    ----------
    line
        One ``nvidia-smi`` sample of the node's GPUs.
    node
        The node it was taken on.
    """
    fullest = max(line.gpus, key=lambda reading: reading.memory_percent)
    if fullest.memory_percent <= GPU_MEMORY_HIGH_PERCENT:
        return None
    return GpuMemoryHigh(at=line.at, node=node, gpu=fullest.index, percent=round(fullest.memory_percent, 1))


def sample_due(stored: GpuLine | None, line: GpuLine, refresh_seconds: float) -> bool:
    """Whether ``line`` replaces the ``stored`` sample: none is stored, or it is ``refresh_seconds`` older.

    A sample older than the stored one (a heartbeat delivered late) never replaces it.
    """
    if stored is None:
        return True
    return (line.at - stored.at).total_seconds() >= refresh_seconds


class IdleCause(DeferredModel):
    """What the agent reports with ``Training.Idle`` (in the failure's JSON cause, beside its message).

    Attributes
    ----------
    node
        The node whose GPUs idled (0 for one node); None when the cause does not say.
    seconds
        How long they stayed below the threshold, as the agent measured it (time-scaled in the emulator).
    utilization_max
        The highest utilization any of its GPUs read meanwhile, percent.
    """

    node: int | None = Field(None, ge=0)
    seconds: float | None = Field(None, ge=0)
    utilization_max: float | None = Field(None, ge=0, le=100)


def read_idle_cause(cause: str) -> IdleCause:
    """The :class:`IdleCause` in a ``Training.Idle`` failure's cause; all None when it holds none."""
    try:
        document = json.loads(cause)
        return IdleCause.model_validate(document if isinstance(document, dict) else {})
    except (ValueError, ValidationError):
        return IdleCause()


def idle_message(policy: GpuIdlePolicy | None, cause: IdleCause, nodes: int) -> str:
    """What the record says of a ``Training.Idle``: which GPUs idled, below what, for how long, and what followed.

    Parameters
    ----------
    policy
        The manifest's ``training.gpu_idle`` (its threshold and minutes, as the user wrote them: the agent's
        seconds are time-scaled in the emulator). None: no policy (the agent had none to apply).
    cause
        What the agent reported.
    nodes
        The job's nodes (a group's message names the node).

    Returns
    -------
    str
        ``"the GPUs stayed below 10 % utilization for 5 minutes (highest reading 2 %): training.gpu_idle stopped
        the command; action fail: the job fails and its instances are released"``.
    """
    whose = "the GPUs" if nodes == 1 or cause.node is None else f"node {cause.node}'s GPUs"
    highest = "" if cause.utilization_max is None else f" (highest reading {cause.utilization_max:g} %)"
    if policy is None:
        return f"{whose} idled{highest}: the agent stopped the command"
    then = (
        "the job fails and its instances are released"
        if policy.action == "fail"
        else "the attempt ends as idle, its instance is terminated, and the job starts again from its last "
        "committed checkpoint on new capacity"
    )
    return (
        f"{whose} stayed below {policy.utilization_below:g} % utilization for {policy.minutes:g} minutes{highest}: "
        f"training.gpu_idle stopped the command; action {policy.action}: {then}"
    )

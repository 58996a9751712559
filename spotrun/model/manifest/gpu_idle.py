"""The manifest's idle policy (``training.gpu_idle``): release GPUs that stopped working instead of billing them.

dstack's ``min_gpu_utilization`` is the peer: a run whose GPUs stay below a utilisation for a time is stopped.
Here every GPU of a node must stay below ``utilization_below`` for ``minutes`` without a break; the agent then
stops the command and reports ``Training.Idle``, and ``action`` says what the job does: ``fail`` ends it (its
instances released), ``relaunch`` ends the attempt as ``idle`` and starts a new one from the last committed
checkpoint on new capacity.
"""

from __future__ import annotations

from typing import Any, Final, Literal, get_args

from pydantic import Field, field_validator

from spotrun.model.manifest.rules import StrictModel

GpuIdleAction = Literal["fail", "relaunch"]
DEFAULT_UTILIZATION_BELOW: Final = 10.0


class GpuIdlePolicy(StrictModel):
    """When a node's GPUs count as idle, and what the job does then."""

    utilization_below: float = Field(
        DEFAULT_UTILIZATION_BELOW,
        gt=0,
        le=100,
        description="Percent of GPU utilization (nvidia-smi's utilization.gpu): a node is idle while every one of "
        "its GPUs reads below it.",
    )
    minutes: float = Field(
        gt=0,
        le=24 * 60,
        description="How long a node's GPUs must stay idle, without one reading at or above utilization_below, "
        "before the agent stops the command. Pick it longer than the script's longest stretch off the GPU "
        "(data loading, evaluation on the CPU, a checkpoint save).",
    )
    action: GpuIdleAction = Field(
        "fail",
        description="'fail': the job ends FAILED with Training.Idle and its instances are released. 'relaunch': "
        "the attempt ends as idle, its idle instance is terminated, and the job starts again from its last "
        "committed checkpoint on new capacity; each relaunch counts against capacity.max_interruptions.",
    )

    @field_validator("action", mode="before")
    @classmethod
    def _known_action(cls, value: Any) -> Any:
        # The Literal states the choice in the schema; this says what was given, which pydantic's message does not.
        allowed = get_args(GpuIdleAction)
        if value not in allowed:
            raise ValueError(f"must be one of {list(allowed)}, got {value!r}")
        return value

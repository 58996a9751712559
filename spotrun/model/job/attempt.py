"""One attempt of a job (an instance's worth of work), and why an attempt ends."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from pydantic import Field

from spotrun.model.base import RecordModel
from spotrun.model.capacity.candidates import Lifecycle
from spotrun.model.capacity.pricing import PriceSource

# Why an attempt (or an instance that hosted none) ended: ``Attempt.end_reason``. The workflow's release after
# success and after failure passes "completed" and "failed" (statemachines/job.asl.json); a cancellation ends
# the attempt "cancelled"; a standby never adopted ends "unused-standby"; the rest mean the capacity went away.
END_CANCELLED = "cancelled"
END_UNUSED_STANDBY = "unused-standby"
# The deadline policy moved the job off spot (checkpoint, then on-demand): no interruption, the pool was fine.
END_DEADLINE_MOVE = "deadline-move"
# "interrupted": EC2 warned the attempt (or its agent saw the notice) before its capacity went away, whatever
# ended its step; the others: the capacity went away without a recorded warning (spotrun.model.job.attempt_end).
InterruptionReason = Literal["interrupted", "instance-lost", "heartbeat-timeout", "boot-timeout"]
INTERRUPTION_REASONS: frozenset[str] = frozenset(get_args(InterruptionReason))
StepsLostBasis = Literal["latest-commit", "restored"]


class CheckpointIntervalUsed(RecordModel):
    """The checkpoint interval the agent told the script (``checkpoint.interval_steps: auto``), and why."""

    interval_seconds: float = Field(gt=0, description="Seconds between the end of a save and the next.")
    why: str = Field(max_length=500, description="The formula and its inputs, or why the default applies.")
    save_seconds: float | None = Field(None, ge=0, description="The save time it was computed from.")


class Attempt(RecordModel):
    """One instance's worth of work on the job."""

    number: int
    instance_id: str
    instance_type: str
    availability_zone: str
    lifecycle: Lifecycle
    price_per_hour: float | None  # None: no figure for this pool (price_source "unknown")
    # Where price_per_hour came from (spotrun.model.capacity.pricing.PriceSource); None on records older than the field.
    price_source: PriceSource | None = None
    started_at: datetime
    ended_at: datetime | None = None
    end_reason: str | None = None
    checkpoint_restored: str | None = None
    restored_step: int | None = None
    setup_seconds: float | None = None  # how long the manifest's training.setup took on this instance
    steps_lost: int | None = Field(
        None,
        description="Steps this attempt reached that the job trains again: last_step minus the step of the "
        "checkpoint the next attempt restored (0: none). Until one stages, from the latest checkpoint committed "
        "when this attempt closed (steps_lost_basis). None: no step reported. Rules: spotrun.model.job.attempt_end.",
    )
    steps_lost_basis: StepsLostBasis | None = Field(
        None,
        description="'latest-commit' (provisional: the old instance may still commit within its notice, and "
        "stays so when no attempt follows) or 'restored' (final: the next attempt's restored checkpoint).",
    )
    last_step: int | None = None  # the last training step reported before the attempt ended
    rebalance_at: datetime | None = None
    notice_at: datetime | None = None  # the spot interruption warning (a late one: when it arrived)
    notice_checkpoint_committed: bool | None = Field(
        None,
        description="For an attempt that got a notice (notice_at): whether the checkpoint it took on it was "
        "committed in time, i.e. its work resumes from the last step it reached (steps_lost 0); settled with "
        "steps_lost. None without a notice, or while the steps lost are unknown.",
    )
    save_failed: str | None = Field(
        None,
        max_length=500,
        description="The command died after the checkpoint signal without committing the step it reached (it "
        "crashed in the middle of its save, or overran its grace): how it ended and its last line, from the "
        "agent. The work then resumes from an earlier checkpoint (steps_lost). None: it saved, or no signal.",
    )
    deadline_move: bool = (
        False  # the notice was the deadline policy's move (off spot, or back), not EC2's warning
    )
    running_at: datetime | None = None  # first seen running by EC2 while its SSM agent was not yet online
    checkpoint_interval: CheckpointIntervalUsed | None = None  # interval_steps: auto (the agent's heartbeats)

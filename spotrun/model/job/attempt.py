"""One attempt of a job (an instance's worth of work), and why an attempt ends."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from pydantic import Field

from spotrun.model.base import RecordModel
from spotrun.model.capacity.candidates import Lifecycle
from spotrun.model.capacity.pricing import PriceSource
from spotrun.model.job.gpu_health import GpuMemoryHigh
from spotrun.model.job.telemetry import GpuLine

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
# The script's steps stopped advancing (training.hang_minutes): its command was stopped and the job restarts from
# its last committed checkpoint. Not a reclaim (its pool is not avoided), but it counts against
# capacity.max_interruptions like one, so a group that hangs again and again ends.
END_HUNG = "hung"
# Every GPU of a node stayed below training.gpu_idle.utilization_below for its minutes and the policy's action is
# "relaunch": the idle instance was terminated and the job restarts from its last committed checkpoint on new
# capacity. Not a reclaim either (the pool is not avoided); it counts against capacity.max_interruptions.
END_IDLE = "idle"
RESTART_REASONS: frozenset[str] = INTERRUPTION_REASONS | {END_HUNG, END_IDLE}
StepsLostBasis = Literal["latest-commit", "restored"]
# A multi-node attempt's healthy node when the attempt ended because another node was lost (or the group hung):
# it keeps running, is not terminated, and the next attempt adopts it.
END_KEPT = "kept"


class NodeRun(RecordModel):
    """One node of a multi-node attempt: its instance and what happened to it.

    The attempt's type, zone, lifecycle and price are every node's; each node has its own instance, its own
    warning and its own end. Node 0 hosts the rendezvous (``torchrun``'s c10d store) and is the attempt's
    ``instance_id``.
    """

    node: int = Field(
        ge=0, description="The node's place in the group for this attempt (0 hosts the rendezvous)."
    )
    instance_id: str
    started_at: datetime = Field(
        description="Since when the attempt counts the instance: its launch, or the previous attempt's end for a "
        "node kept from it (EC2 bills it without a gap)."
    )
    ended_at: datetime | None = None
    end_reason: str | None = None
    kept_from: int | None = Field(
        None, description="The attempt this node was kept from; None: launched for this one."
    )
    private_ip: str | None = Field(None, description="Its private IPv4 address, where its peers reach it.")
    rebalance_at: datetime | None = None
    notice_at: datetime | None = None  # EC2's interruption warning for this node
    running_at: datetime | None = None  # first seen running by EC2 while its SSM agent was not yet online
    done: bool = Field(False, description="Its agent reported the step in progress a success.")
    gpu: GpuLine | None = Field(
        None,
        description="The node's latest GPU sample as its heartbeats carry it, refreshed in the record every few "
        "minutes (spotrun.model.job.gpu_health); the full series is the job's telemetry.",
    )
    gpu_memory_high: GpuMemoryHigh | None = Field(
        None, description="The node's first reading of a GPU's memory above 90 % in this attempt."
    )


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
    # One node's GPU health; a group's nodes hold theirs (NodeRun.gpu): read every node's with node_runs().
    gpu: GpuLine | None = Field(
        None, description="One node: its latest GPU sample (see NodeRun.gpu). A group: None, on its nodes."
    )
    gpu_memory_high: GpuMemoryHigh | None = Field(
        None, description="One node: its first reading of GPU memory above 90 %. A group: None, on its nodes."
    )
    nodes: list[NodeRun] = Field(
        default_factory=list,
        description="A multi-node attempt's nodes, node 0 first (its instance is instance_id); empty for one node. "
        "notice_at and rebalance_at above are then the group's first.",
    )
    efa: bool = Field(False, description="A group's nodes were launched with an Elastic Fabric Adapter.")
    leader_result: str | None = Field(
        None,
        repr=False,
        description="A multi-node step: node 0's result (JSON), kept until every node has reported success.",
    )

    @property
    def group(self) -> bool:
        """Whether the attempt runs several nodes."""
        return len(self.nodes) > 1

    def node_runs(self) -> list[NodeRun]:
        """Every node of the attempt, node 0 first; one node made of the attempt's own fields when it has no group."""
        if self.nodes:
            return list(self.nodes)
        return [
            NodeRun(
                node=0,
                instance_id=self.instance_id,
                started_at=self.started_at,
                ended_at=self.ended_at,
                end_reason=self.end_reason,
                rebalance_at=self.rebalance_at,
                notice_at=self.notice_at,
                running_at=self.running_at,
                gpu=self.gpu,
                gpu_memory_high=self.gpu_memory_high,
            )
        ]

    def instance_ids(self) -> list[str]:
        """The instances of every node, node 0 first."""
        return [node.instance_id for node in self.node_runs()]

    def node_on(self, instance_id: str) -> NodeRun | None:
        """The node running on ``instance_id``, if it is one of this attempt's."""
        return next((node for node in self.node_runs() if node.instance_id == instance_id), None)

    def with_node(self, node: NodeRun) -> Attempt:
        """A copy whose node ``node.node`` is ``node`` (a group attempt), or whose own fields take it (one node)."""
        if not self.nodes:
            fields = (
                "ended_at",
                "end_reason",
                "rebalance_at",
                "notice_at",
                "running_at",
                "gpu",
                "gpu_memory_high",
            )
            return self.model_copy(update={name: getattr(node, name) for name in fields})
        return self.model_copy(update={"nodes": [node if n.node == node.node else n for n in self.nodes]})

    def billed(self) -> list[Attempt]:
        """One record per instance, for :func:`spotrun.model.capacity.pricing.job_cost`: the attempt itself for
        one node; for a group, a copy per node with that node's instance, start and end (an open node ends
        with the attempt). A node kept into the next attempt is billed in each from where the last ended, and
        EC2's 60-second minimum applies to each record: an upper bound when an attempt lasts under a minute."""
        if not self.nodes:
            return [self]
        return [
            self.model_copy(
                update={
                    "instance_id": node.instance_id,
                    "started_at": node.started_at,
                    "ended_at": node.ended_at or self.ended_at,
                    "nodes": [],
                }
            )
            for node in self.nodes
        ]

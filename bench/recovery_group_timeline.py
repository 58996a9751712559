"""What the group recovery bench observed of one node's interruption, and its figures (pure: no emulator).

:class:`GroupTimeline` holds wall-clock times (``time.time()`` seconds) of what the probe of
:mod:`bench.recovery_group` saw of every instance of a multi-node job; :func:`group_figures` turns them into the
recovery and the GPU-seconds lost. Kept apart from the probe so that the arithmetic is tested on recorded
timelines (``tests/unit/test_bench_recovery_group.py``).

What "GPU-seconds lost" counts: for every instance, the seconds EC2 bills (the instance in state ``running``:
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html, "pending", "shutting-down" and
"terminated" are not billed) between the warning and the resumed attempt's first step, less the span the old
group went on training after the warning up to its last progress write when the restored checkpoint holds that
step (that write follows the save the group resumes from, so the save counts as useful, its upload does not),
times the instance's GPUs. A kept node waiting for its replacement counts; a replacement counts from ``running``
(its ``pending`` boot is not billed); a released node counts until its termination began (``shutting-down``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.recovery_timeline import IncompleteTimeline, need, step_time, step_times

WARNED, HEALTHY, NEW = "warned", "healthy", "new"
ROLES = (WARNED, HEALTHY, NEW)
__all__ = [
    "HEALTHY",
    "NEW",
    "ROLES",
    "WARNED",
    "GroupFigures",
    "GroupTimeline",
    "IncompleteTimeline",
    "NodeSeen",
    "group_figures",
    "overlap",
]


@dataclass
class NodeSeen:
    """One instance of the job as the probe saw it (seconds since the epoch; None: never seen).

    Attributes
    ----------
    role
        ``warned`` (the node interrupted), ``healthy`` (the old group's other nodes) or ``new`` (launched after
        the warning).
    gpus
        The instance type's GPUs.
    launched
        The instance was first seen (RunInstances returned it, ``pending``).
    running
        EC2 reported it ``running`` (billing starts).
    reachable
        It could take a command: booted and its SSM agent registered.
    ended
        Its termination began (``shutting-down``: billing stops).
    """

    role: str
    gpus: int = 1
    launched: float | None = None
    running: float | None = None
    reachable: float | None = None
    ended: float | None = None


@dataclass
class GroupTimeline:
    """Times observed during one interrupted multi-node job.

    Attributes
    ----------
    warning
        The emulator set the warned node's IMDS ``spot/instance-action`` notice.
    nodes
        Instance id -> :class:`NodeSeen`.
    old_saved
        Step -> when that checkpoint was complete on one of the old group's disks (the first seen).
    old_committed
        Step -> when that checkpoint's commit marker was in S3 (written once every node's part is there).
    old_last_progress
        ``(step, time)``: the last progress the interrupted attempt's rank 0 wrote (the file's modification time).
    first_step
        ``(step, time)``: the first progress the resumed attempt wrote (the file's modification time).
    reclaimed
        EC2 reclaimed the warned node at the end of its notice and the bench let the held launch through (the
        ``reclaimed`` mode only; None otherwise). The span from the warning to it is the notice, scaled by the
        emulator like a boot.
    restored_step
        The checkpoint step the resumed attempt restored (its record's ``restored_step``).
    """

    warning: float | None = None
    nodes: dict[str, NodeSeen] = field(default_factory=dict)
    old_saved: dict[int, float] = field(default_factory=dict)
    old_committed: dict[int, float] = field(default_factory=dict)
    old_last_progress: tuple[int, float] | None = None
    first_step: tuple[int, float] | None = None
    restored_step: int | None = None
    reclaimed: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GroupTimeline:
        """The inverse of :meth:`as_dict`, after a JSON round trip (object keys are strings, tuples lists)."""

        return cls(
            warning=data.get("warning"),
            nodes={iid: NodeSeen(**seen) for iid, seen in (data.get("nodes") or {}).items()},
            old_saved=step_times(data, "old_saved"),
            old_committed=step_times(data, "old_committed"),
            old_last_progress=step_time(data, "old_last_progress"),
            first_step=step_time(data, "first_step"),
            restored_step=data.get("restored_step"),
            reclaimed=data.get("reclaimed"),
        )


@dataclass(frozen=True)
class GroupFigures:
    """One node's interruption in a group: the recovery and what it cost, wall seconds and AWS seconds.

    The AWS figures (``*_aws``) take the emulator's scaled spans back to AWS's clock: for what waits on the new
    nodes (the resumed step, and a node billed until it), every second inside a new node's launch -> reachable
    span (the boot the emulator shrinks by the time scale) or inside the warning -> reclaimed span (the notice
    the ``reclaimed`` mode waits out, scaled alike) counts ``1 / time_scale``; every other second counts as
    measured (the save, upload, restore and torchrun's start run at this machine's speed, and the emulator's own
    time-scaled polls are taken as they were). A node released before the resumed step waits on no boot: its
    span is taken as measured.
    """

    recovery: float  # the warning -> the resumed attempt's first step
    recovery_aws: float
    launch: float  # the warning -> the first new node seen (RunInstances returned it), wall
    boot: float  # the longest launch -> reachable of a new node (they boot in parallel)
    commit: (
        float  # the warning -> the restored checkpoint's commit marker (the save and upload on the warning)
    )
    restart: (
        float  # the last new node reachable -> the first resumed step (setup, torchrun, rendezvous, restore)
    )
    gpu_seconds_lost: float  # summed over nodes
    gpu_seconds_lost_aws: float
    lost_by_role: dict[str, float]  # the same, per role (ROLES)
    lost_by_role_aws: dict[str, float]
    nodes_released: int  # the old group's nodes whose termination began before the resumed step
    restored_step: int
    steps_lost: int | None  # steps the old attempt reported past the restored checkpoint

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def overlap(start: float, end: float, spans: Iterable[tuple[float, float]]) -> float:
    """Seconds of ``[start, end]`` inside the union of ``spans`` (which may overlap one another)."""
    total, reached = 0.0, start
    for low, high in sorted(spans):
        low, high = max(low, reached), min(high, end)
        if high > low:
            total += high - low
            reached = high
    return total


def group_figures(timeline: GroupTimeline, time_scale: float) -> GroupFigures:
    """The recovery of one node's interruption and the GPU-seconds it lost (see the module docstring).

    Raises
    ------
    IncompleteTimeline
        When an event a figure needs was never observed, or the restored checkpoint was never committed.
    """
    warning = need(timeline.warning, "the warning")
    _, first = need(timeline.first_step, "the resumed attempt's first step")
    restored = need(timeline.restored_step, "the restored step")
    committed = need(timeline.old_committed.get(restored), f"the commit of step {restored}")
    new = [seen for seen in timeline.nodes.values() if seen.role == NEW]
    if not new:
        raise IncompleteTimeline("never observed: a node launched after the warning")
    boots = []
    for seen in new:
        launched = need(seen.launched, "a new node's launch")
        boots.append((launched, need(seen.reachable, "a new node reachable")))
    stretch = 1.0 / time_scale - 1.0
    # The emulator's scaled spans: the new nodes' boots and, when the launch waited for EC2's reclaim, the notice.
    scaled = boots + ([(warning, timeline.reclaimed)] if timeline.reclaimed is not None else [])
    old_step, old_time = need(timeline.old_last_progress, "the interrupted attempt's progress")
    steps_lost = max(0, old_step - restored)
    # The old group trained (and saved what it resumes from) until its last progress write, when that is kept.
    trained_until = old_time if steps_lost == 0 else warning
    lost = dict.fromkeys(ROLES, 0.0)
    lost_aws = dict.fromkeys(ROLES, 0.0)
    released = 0
    for seen in timeline.nodes.values():
        if seen.role != NEW and seen.ended is not None and seen.ended < first:
            released += 1
        if seen.running is None or seen.running >= first:
            continue  # never billed in the window
        start = max(warning, seen.running, trained_until if seen.role != NEW else warning)
        released_first = seen.ended is not None and seen.ended < first
        end = seen.ended if released_first and seen.ended is not None else first
        if end <= start:
            continue
        lost[seen.role] += (end - start) * seen.gpus
        # A node billed until the resumed step waits on the new nodes' boot; one released before it does not
        # (spotrun terminated it once the group's checkpoint was committed): its span is taken as measured.
        waited = 0.0 if released_first else overlap(start, end, scaled)
        lost_aws[seen.role] += (end - start + stretch * waited) * seen.gpus
    recovery = first - warning
    return GroupFigures(
        recovery=recovery,
        recovery_aws=recovery + stretch * overlap(warning, first, scaled),
        launch=min(low for low, _ in boots) - warning,
        boot=max(high - low for low, high in boots),
        commit=committed - warning,
        restart=first - max(high for _, high in boots),
        gpu_seconds_lost=sum(lost.values()),
        gpu_seconds_lost_aws=sum(lost_aws.values()),
        lost_by_role=lost,
        lost_by_role_aws=lost_aws,
        nodes_released=released,
        restored_step=restored,
        steps_lost=steps_lost,
    )

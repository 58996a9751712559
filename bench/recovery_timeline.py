"""What the recovery bench observed of one interruption, and the figures computed from it (pure: no emulator).

:class:`Timeline` holds wall-clock times (``time.time()`` seconds, the clock file modification times use) of
what the probe of :mod:`bench.recovery` saw; :func:`recovery_figures` turns them into the recovery and its
parts. Kept apart from the probe so that the arithmetic is tested on recorded timelines.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Timeline:
    """Times observed during one interrupted job (seconds since the epoch; None: never seen).

    Attributes
    ----------
    warning
        The emulator set the IMDS ``spot/instance-action`` notice of the interrupted instance.
    old_saved
        Step -> when that checkpoint was complete (renamed into place) on the interrupted instance's disk.
    old_committed
        Step -> when that checkpoint's commit marker was in S3.
    old_last_step
        The last step the interrupted attempt reported in its progress file.
    launched
        The replacement instance was launched (RunInstances).
    reachable
        The replacement could take a command: booted and its SSM agent registered.
    restore_started
        The first entry (the restore's temporary directory) appeared in the replacement's checkpoint directory.
    restored
        Step -> when that checkpoint was complete on the replacement's disk.
    first_step
        ``(step, time)``: the first progress the resumed attempt wrote (the file's modification time).
    """

    warning: float | None = None
    old_saved: dict[int, float] = field(default_factory=dict)
    old_committed: dict[int, float] = field(default_factory=dict)
    old_last_step: int | None = None
    launched: float | None = None
    reachable: float | None = None
    restore_started: float | None = None
    restored: dict[int, float] = field(default_factory=dict)
    first_step: tuple[int, float] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Timeline:
        """The inverse of :meth:`as_dict`, after a JSON round trip (whose object keys are strings)."""

        return cls(
            warning=data.get("warning"),
            old_saved=step_times(data, "old_saved"),
            old_committed=step_times(data, "old_committed"),
            old_last_step=data.get("old_last_step"),
            launched=data.get("launched"),
            reachable=data.get("reachable"),
            restore_started=data.get("restore_started"),
            restored=step_times(data, "restored"),
            first_step=step_time(data, "first_step"),
        )


def step_times(data: dict[str, Any], name: str) -> dict[int, float]:
    """``data[name]``, a step -> time mapping, after a JSON round trip (whose object keys are strings)."""
    return {int(step): float(at) for step, at in (data.get(name) or {}).items()}


def step_time(data: dict[str, Any], name: str) -> tuple[int, float] | None:
    """``data[name]``, a ``(step, time)`` pair, after a JSON round trip (which makes a tuple a list)."""
    value = data.get(name)
    return None if value is None else (int(value[0]), float(value[1]))


class IncompleteTimeline(ValueError):
    """The timeline lacks an event a figure needs (the message names it)."""


@dataclass(frozen=True)
class RecoveryFigures:
    """One interruption's recovery and its parts, in seconds.

    ``limit`` is what the issue calls the limit: the replacement's boot and the old instance's upload run in
    parallel at best, then the restore, ``max(boot, upload) + restore``. ``sequential`` is its counterpart when
    nothing overlaps: the replacement launched the moment the checkpoint it restores is committed, then its boot
    and the restore, ``(commit - warning) + boot + restore``. ``limit / sequential`` is then the ratio the
    overlap would reach against the baseline if neither side spent a moment more than its parts.
    """

    recovery: float  # warning -> the resumed attempt's first step
    boot: float  # replacement launched -> reachable
    upload: float  # the restored checkpoint: complete on the old disk -> its commit marker in S3
    restore: float  # first entry in the replacement's checkpoint directory -> the checkpoint complete there
    save: float | None  # warning -> the restored checkpoint complete on the old disk (None: saved before it)
    limit: float
    ratio_to_limit: float
    sequential: float
    after_launch: float  # the replacement's launch -> the resumed attempt's first step
    restored_step: int
    first_resumed_step: int
    steps_lost: int | None  # steps the old attempt reported past the restored checkpoint

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def need(value: Any, what: str) -> Any:
    """``value``, observed.

    Raises
    ------
    IncompleteTimeline
        When ``value`` is None: ``what`` was never observed.
    """
    if value is None:
        raise IncompleteTimeline(f"never observed: {what}")
    return value


def recovery_figures(timeline: Timeline) -> RecoveryFigures:
    """The recovery of one interruption and its parts, from what was observed.

    The checkpoint that matters is the one the replacement restored (the first complete on its disk): its
    upload is timed on the old instance, its restore on the replacement.

    Raises
    ------
    IncompleteTimeline
        When an event a figure needs was never observed, or the restored checkpoint was never committed.
    """
    warning = need(timeline.warning, "the warning")
    launched = need(timeline.launched, "the replacement's launch")
    reachable = need(timeline.reachable, "the replacement reachable")
    step, first = need(timeline.first_step, "the resumed attempt's first step")
    if not timeline.restored:
        raise IncompleteTimeline("never observed: a checkpoint restored on the replacement")
    restored_step = min(timeline.restored, key=lambda s: timeline.restored[s])
    restored_at = timeline.restored[restored_step]
    committed = need(timeline.old_committed.get(restored_step), f"the commit of step {restored_step}")
    saved = need(timeline.old_saved.get(restored_step), f"step {restored_step} saved on the old instance")
    # A restore too quick for the probe to see its temporary directory lasted less than one poll: 0.
    restore_started = timeline.restore_started if timeline.restore_started is not None else restored_at
    boot = reachable - launched
    upload = committed - saved
    restore = max(0.0, restored_at - restore_started)
    limit = max(boot, upload) + restore
    sequential = max(0.0, committed - warning) + boot + restore
    recovery = first - warning
    steps_lost = None if timeline.old_last_step is None else max(0, timeline.old_last_step - restored_step)
    return RecoveryFigures(
        recovery=recovery,
        boot=boot,
        upload=upload,
        restore=restore,
        save=saved - warning if saved >= warning else None,
        limit=limit,
        ratio_to_limit=recovery / limit if limit > 0 else float("inf"),
        sequential=sequential,
        after_launch=first - launched,
        restored_step=restored_step,
        first_resumed_step=step,
        steps_lost=steps_lost,
    )

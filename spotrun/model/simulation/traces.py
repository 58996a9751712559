"""Spot traces: recorded spot capacity, tick by tick, for the simulator and the bench.

Pure (the standard library and pydantic; the reading of files is :func:`load_trace`'s, the only I/O here). The
format (``../shared/traces/README.md``, from skypilot-org/spot-traces, the data of "Can't Be Late", NSDI'24)::

    {"metadata": {"gap_seconds": G}, "data": [n0, n1, ...]}

``n_i`` is the number of live (*preemption* traces) or obtainable (*availability* traces) spot instances at tick
``i``, ``G`` seconds apart. The replay reads both the same way: spot can be had at a tick when ``n_i > 0``, and an
instance held through a tick where ``n_i`` falls to 0 is preempted. The kind is kept for the report only.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path

from pydantic import ConfigDict, Field, ValidationError

from spotrun.model.base import DeferredModel


class TraceError(ValueError):
    """A trace file that cannot be replayed; the message names the file and the problem."""


class TraceKind(enum.StrEnum):
    PREEMPTION = "preemption"
    AVAILABILITY = "availability"
    UNKNOWN = "unknown"


class _Metadata(DeferredModel):
    model_config = ConfigDict(extra="allow")
    gap_seconds: int = Field(gt=0)


class _TraceFile(DeferredModel):
    model_config = ConfigDict(extra="allow")
    metadata: _Metadata
    data: list[int] = Field(min_length=2)


class Trace(DeferredModel):
    """One replayable trace: its name, kind, tick length and capacity per tick (validated)."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: TraceKind
    gap_seconds: int = Field(gt=0)
    capacity: tuple[int, ...] = Field(min_length=2)

    @property
    def hours(self) -> float:
        return len(self.capacity) * self.gap_seconds / 3600

    def steps(self, step_seconds: int) -> tuple[int, tuple[bool, ...]]:
        """The trace resampled to steps of about ``step_seconds``: (the step in seconds, spot obtainable per step).

        A step is a whole number of ticks; spot counts as obtainable through a step only if it is at every tick
        of it (a capacity gap inside a step preempts whatever held it: the conservative reading).
        """
        ticks = max(1, round(step_seconds / self.gap_seconds))
        usable = len(self.capacity) // ticks * ticks
        flags = tuple(all(n > 0 for n in self.capacity[i : i + ticks]) for i in range(0, usable, ticks))
        return ticks * self.gap_seconds, flags


def _kind_from_path(path: Path) -> TraceKind:
    for part in reversed(path.parts):
        if part in (TraceKind.PREEMPTION.value, TraceKind.AVAILABILITY.value):
            return TraceKind(part)
    return TraceKind.UNKNOWN


def parse_trace(name: str, text: str | bytes, kind: TraceKind = TraceKind.UNKNOWN) -> Trace:
    """A trace from its JSON text.

    Parameters
    ----------
    name:
        What reports call it (the file's path under the traces directory).
    text:
        The file's content.
    kind:
        Preemption or availability, when known.

    Returns
    -------
    Trace

    Raises
    ------
    TraceError
        Not JSON, or not the format: the message names the trace and each problem's field.
    """
    try:
        raw = _TraceFile.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}" for err in exc.errors()
        )
        raise TraceError(f"{name}: not a spot trace ({problems})") from None
    if any(n < 0 for n in raw.data):
        raise TraceError(f"{name}: data holds a negative instance count")
    return Trace(name=name, kind=kind, gap_seconds=raw.metadata.gap_seconds, capacity=tuple(raw.data))


def load_trace(path: Path, root: Path | None = None) -> Trace:
    """Read one trace file; its name is its path relative to ``root`` (when given), its kind from the path."""
    name = str(path.relative_to(root)) if root is not None else path.name
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from None
    return parse_trace(name, text, _kind_from_path(path))


def load_traces(directory: Path) -> list[Trace]:
    """Every ``*.json`` trace under ``directory`` (recursively), sorted by name.

    Raises
    ------
    TraceError
        The directory is missing or holds no trace, or a file is not a trace.
    """
    if not directory.is_dir():
        raise TraceError(f"{directory}: not a directory of traces")
    files = sorted(directory.rglob("*.json"))
    if not files:
        raise TraceError(f"{directory}: no *.json trace in it")
    return [load_trace(path, directory) for path in files]


def preemptions(flags: tuple[bool, ...]) -> list[int]:
    """The steps at which capacity held at the step before is gone: the preemptions of an instance kept on it."""
    return [i for i in range(1, len(flags)) if flags[i - 1] and not flags[i]]


def spot_mtbf_hours(flags: tuple[bool, ...], step_hours: float) -> float:
    """Mean spot time between preemptions over the whole trace (``inf`` when none): the pool's interruption rate."""
    count = len(preemptions(flags))
    alive = sum(flags) * step_hours
    return alive / count if count else float("inf")


def dumps_trace(gap_seconds: int, capacity: list[int]) -> str:
    """The JSON text of a trace in the shared format (tests and the emulator write traces with it)."""
    return json.dumps({"metadata": {"gap_seconds": gap_seconds}, "data": capacity})

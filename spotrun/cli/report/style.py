"""What the report's charts and page share: a colour per state, a marker per event, the time axis' unit."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from spotrun.cli.display.summary import duration
from spotrun.control.views.report_model import STANDBY_PHASE, EventKind

# One colour per job state (and for an instance's standby time), on the chart and in the page's tables.
STATE_COLOURS: dict[str, str] = {
    "SUBMITTED": "#bdbdbd",
    "ACQUIRING": "#f4a259",
    STANDBY_PHASE: "#dbe7f5",
    "BOOTING": "#8fb8de",
    "STAGING": "#4a90c2",
    "TRAINING": "#2e9e5b",
    "INTERRUPTED": "#d9480f",
    "ARCHIVING": "#7b6cb0",
    "SUCCEEDED": "#1b6e3a",
    "FAILED": "#a50f15",
    "REJECTED": "#a50f15",
    "CANCELLED": "#8c8c8c",
}
STATE_LABELS: dict[str, str] = {state: state.lower() for state in STATE_COLOURS} | {
    STANDBY_PHASE: "launched on the warning, before its attempt"
}

# event kind -> (matplotlib marker, colour, legend label)
EVENT_MARKERS: dict[EventKind, tuple[str, str, str]] = {
    "rebalance": ("d", "#c99700", "rebalance recommendation"),
    "warning": ("v", "#d9480f", "interruption warning"),
    "deadline-move": ("v", "#7b6cb0", "deadline policy move"),
    "interruption": ("X", "#a50f15", "capacity lost (interruption)"),
    "restart": ("X", "#6d4c41", "restarted (hung or idle)"),
    "end": ("|", "#333333", "attempt ended"),
    "restore": ("o", "#2e9e5b", "checkpoint restored"),
    "gpu-memory-high": ("^", "#8e24aa", "GPU memory above 90 %"),
}

# A colour per series (attempt, or node and GPU): matplotlib's tab10, in its order.
_SERIES = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")


def series_colour(index: int) -> str:
    """The ``index``-th series' colour (they repeat after nine)."""
    return _SERIES[index % len(_SERIES)]


@dataclass(frozen=True)
class TimeAxis:
    """Time since submission in one unit: seconds for a run of minutes, minutes for hours, hours beyond."""

    origin: datetime
    seconds_per_unit: float
    unit: str

    def of(self, at: datetime) -> float:
        """``at`` as a position on the axis."""
        return (at - self.origin).total_seconds() / self.seconds_per_unit

    @property
    def label(self) -> str:
        """The axis' title."""
        return f"{self.unit} since submission"

    @staticmethod
    def duration(seconds: float) -> str:
        """A state's duration as the chart writes it (``1.4 s`` under a minute, as ``spotrun status`` beyond)."""
        return f"{seconds:.1f} s" if seconds < 60 else duration(seconds)


def time_axis(origin: datetime, until: datetime) -> TimeAxis:
    """The unit that keeps the axis' numbers readable for a job that ran from ``origin`` to ``until``."""
    span = (until - origin).total_seconds()
    if span <= 300:
        return TimeAxis(origin, 1.0, "seconds")
    if span <= 3 * 3600:
        return TimeAxis(origin, 60.0, "minutes")
    return TimeAxis(origin, 3600.0, "hours")

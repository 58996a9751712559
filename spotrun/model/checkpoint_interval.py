"""``checkpoint.interval: auto``: the interval between saves that minimises the expected lost work.

Pure. Young (1974): ``sqrt(2 C M)``; Daly (2006, "A higher order estimate of the optimum checkpoint interval for
restart dumps"): ``sqrt(2 C M) [1 + sqrt(C / 2M) / 3 + (C / 2M) / 9] - C`` while ``C < 2M``, else ``M``. ``C``
is one save's duration; ``M`` the mean time between *uncovered* failures: the interruptions the two-minute
notice does not cover (a silent death, or any interruption when a save takes longer than the notice). A
covered interruption costs no work (the agent saves inside the notice), so a reliable notice makes ``M`` long
and the interval long; the cap keeps it finite (an infinite interval would leave a silent death unbounded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Formula = Literal["young", "daly"]


@dataclass(frozen=True)
class IntervalChoice:
    """The interval chosen (hours) and why: the inputs, for the job's record."""

    interval_hours: float
    formula: Formula
    checkpoint_hours: float
    uncovered_mtbf_hours: float
    capped: bool

    @property
    def why(self) -> str:
        mtbf = (
            "no uncovered failure seen"
            if math.isinf(self.uncovered_mtbf_hours)
            else (f"mean time between uncovered failures {self.uncovered_mtbf_hours:.2f} h")
        )
        cap = ", capped" if self.capped else ""
        return (
            f"{self.formula} interval {self.interval_hours:.2f} h from a {self.checkpoint_hours * 60:.1f}-minute "
            f"save and {mtbf}{cap}"
        )


def young_interval(checkpoint_hours: float, mtbf_hours: float) -> float:
    """Young's first-order optimum, ``sqrt(2 C M)`` hours."""
    return math.sqrt(2 * checkpoint_hours * mtbf_hours)


def daly_interval(checkpoint_hours: float, mtbf_hours: float) -> float:
    """Daly's higher-order optimum (module docstring); ``M`` once the save is as long as ``2M``."""
    c, m = checkpoint_hours, mtbf_hours
    if c >= 2 * m:
        return m
    ratio = c / (2 * m)
    return math.sqrt(2 * c * m) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - c


def uncovered_fraction(checkpoint_hours: float, notice_hours: float, silent_fraction: float) -> float:
    """The share of interruptions that lose work: all when a save outlasts the notice, else the silent ones."""
    return 1.0 if checkpoint_hours > notice_hours else silent_fraction


def auto_interval(
    checkpoint_hours: float,
    uncovered_mtbf_hours: float,
    max_interval_hours: float,
    formula: Formula = "daly",
) -> IntervalChoice:
    """The interval for ``checkpoint.interval: auto``.

    Parameters
    ----------
    checkpoint_hours:
        One save's measured duration, ``C`` (> 0).
    uncovered_mtbf_hours:
        ``M``: the pool's mean time between interruptions the notice does not cover; ``inf`` when none was seen.
    max_interval_hours:
        The cap (> 0): the longest the job may run unsaved whatever the estimate says.
    formula:
        ``"daly"`` (default) or ``"young"``.

    Returns
    -------
    IntervalChoice
        The interval and its inputs.
    """
    if checkpoint_hours <= 0 or max_interval_hours <= 0:
        raise ValueError("the checkpoint duration and the interval cap must be positive")
    if uncovered_mtbf_hours <= 0:
        raise ValueError("the mean time between uncovered failures must be positive")
    if math.isinf(uncovered_mtbf_hours):
        raw = math.inf
    elif formula == "young":
        raw = young_interval(checkpoint_hours, uncovered_mtbf_hours)
    else:
        raw = daly_interval(checkpoint_hours, uncovered_mtbf_hours)
    interval = min(raw, max_interval_hours)
    return IntervalChoice(
        interval, formula, checkpoint_hours, uncovered_mtbf_hours, capped=raw > max_interval_hours
    )


def expected_lost_work_hours(interval_hours: float, uncovered_failures: float) -> float:
    """The Young/Daly model's expected work lost to ``uncovered_failures`` failures at this interval.

    An uncovered failure strikes at a uniformly random point of the interval, so it loses half of one on average
    (the model behind both formulas); the bench compares measured losses with this bound.
    """
    return uncovered_failures * interval_hours / 2

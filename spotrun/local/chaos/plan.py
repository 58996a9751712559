"""Where injected interruptions fall in a training run, and when one is due. Pure logic: no threads, no AWS.

``spotrun demo --interruptions N`` plans N steps with :func:`plan_interruptions`, then feeds the job's progress
to an :class:`InterruptionSchedule`, which says when the current attempt has reached the next planned step.
Each planned interruption hits a new attempt: once an attempt has been interrupted, its later progress (the
notice gives it two minutes to checkpoint) never triggers another.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

# Interruptions avoid this fraction of the steps at each end, so each one hits training under way (not staging
# nor the final upload).
EDGE_MARGIN = 0.1


def interruption_window(total_steps: int, margin: float = EDGE_MARGIN) -> tuple[int, int]:
    """First and last step (both included) at which an interruption may be planned.

    Parameters
    ----------
    total_steps
        Steps of the whole training run.
    margin
        Fraction of the steps left alone at each end, in ``[0, 0.5)``.

    Returns
    -------
    tuple[int, int]
        ``(low, high)`` with ``1 <= low <= high < total_steps``.

    Raises
    ------
    ValueError
        When the run is too short to be interrupted inside it, or the margin is out of range.
    """
    if not 0 <= margin < 0.5:
        raise ValueError(f"margin must be in [0, 0.5), not {margin}")
    low = max(1, math.ceil(total_steps * margin))
    high = min(total_steps - 1, math.floor(total_steps * (1 - margin)))
    if high < low:
        raise ValueError(f"a run of {total_steps} steps is too short to be interrupted")
    return low, high


def plan_interruptions(
    count: int,
    total_steps: int,
    seed: int,
    *,
    margin: float = EDGE_MARGIN,
    min_gap: int | None = None,
) -> list[int]:
    """Choose ``count`` distinct steps, at random, at which to interrupt a run.

    Every spread of the steps that keeps them ``min_gap`` apart inside the window is equally likely, and the
    same arguments always give the same steps.

    Parameters
    ----------
    count
        How many interruptions; 0 plans none.
    total_steps
        Steps of the whole training run.
    seed
        Seed of the random choice.
    margin
        Fraction of the steps avoided at each end (see :func:`interruption_window`).
    min_gap
        Least distance between two planned steps, so that each attempt does some work before its own
        interruption. By default half of an even share of the window: ``max(1, width // (2 * count))``.

    Returns
    -------
    list[int]
        The steps, ascending.

    Raises
    ------
    ValueError
        When ``count`` is negative, ``min_gap`` is below 1, or the steps do not fit in the window.
    """
    if count < 0:
        raise ValueError(f"the number of interruptions cannot be negative ({count})")
    if count == 0:
        return []
    low, high = interruption_window(total_steps, margin)
    width = high - low + 1
    gap = max(1, width // (2 * count)) if min_gap is None else min_gap
    if gap < 1:
        raise ValueError(f"min_gap must be at least 1, not {gap}")
    # Draw from a window shrunk by the gaps, then spread the sorted draws out again: uniform over valid plans.
    slack = width - (count - 1) * (gap - 1)
    if slack < count:
        raise ValueError(
            f"{count} interruptions {gap} step(s) apart do not fit between steps {low} and {high} "
            f"of a {total_steps}-step run"
        )
    rng = random.Random(seed)  # noqa: S311 - a simulation, not security
    draws = sorted(rng.sample(range(slack), count))
    return [low + draw + index * (gap - 1) for index, draw in enumerate(draws)]


@dataclass(frozen=True)
class Hit:
    """An interruption that is due: which attempt and instance, at which step."""

    attempt: int
    instance_id: str
    step: int  # the step the attempt had reached when it was seen
    planned_step: int


class InterruptionSchedule:
    """Decides, from observed progress, when the current attempt is due for the next planned interruption.

    Parameters
    ----------
    steps
        The planned steps (e.g. from :func:`plan_interruptions`); they are taken in ascending order.
    """

    def __init__(self, steps: Iterable[int]):
        self._pending = sorted(steps)
        self._hits: list[Hit] = []

    @property
    def pending(self) -> tuple[int, ...]:
        """Planned steps not used yet, ascending."""
        return tuple(self._pending)

    @property
    def hits(self) -> tuple[Hit, ...]:
        """The interruptions decided so far, in order."""
        return tuple(self._hits)

    def observe(self, attempt: int, instance_id: str, step: int | None) -> Hit | None:
        """Take one observation of the current attempt; return the interruption to inject now, if one is due.

        Parameters
        ----------
        attempt
            Number of the job's current attempt.
        instance_id
            The instance it runs on.
        step
            The latest training step it reported, or None when it has reported none yet.

        Returns
        -------
        Hit or None
            A hit when ``step`` has reached the next planned step and this attempt has not been interrupted
            yet (nor is older than one that was); the planned step is then used up.
        """
        if not self._pending or step is None or step < self._pending[0]:
            return None
        if self._hits and attempt <= self._hits[-1].attempt:
            return None
        hit = Hit(attempt=attempt, instance_id=instance_id, step=step, planned_step=self._pending.pop(0))
        self._hits.append(hit)
        return hit

"""``checkpoint.interval_steps: auto``: the agent decides how long the script trains between checkpoints.

The script reports how long each save took (:class:`spotrun.training_files.ProgressFile`, read by
:class:`~spotrun.agent.progress.ProgressPublisher`). From that cost ``C`` and the pool's interruption rate in the
train command (:class:`spotrun.model.interruption_rate.PoolRate`) the agent keeps only the interruptions the
notice does not cover (the silent ones, or all of them once a save outlasts the 2-minute notice), takes
Daly's interval for them (:func:`spotrun.model.checkpoint_interval.auto_interval`) and writes it, in seconds, to
the interval file the script's :meth:`spotrun.training.Run.checkpoint_due` reads. Before any save was measured
the interval is :data:`spotrun.training_files.DEFAULT_FIRST_INTERVAL_SECONDS`: the first checkpoint then comes
soon enough to be measured and to bound what an early death loses.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from pathlib import Path

from spotrun.model import layout
from spotrun.model.checkpoint_interval import auto_interval, uncovered_fraction
from spotrun.model.interruption_rate import NOTICE_SECONDS, PoolRate
from spotrun.model.job import CheckpointIntervalUsed
from spotrun.training_files import DEFAULT_FIRST_INTERVAL_SECONDS

logger = logging.getLogger(__name__)


def choose_interval(
    save_seconds: float | None, rate: PoolRate, max_interval_hours: float
) -> CheckpointIntervalUsed:
    """The interval for a measured save time (None: none measured yet) and the pool's rate.

    Parameters
    ----------
    save_seconds
        How long the script's last save took; None before its first.
    rate
        The pool's interruption rate and silent share (the train command's ``pool_rate``).
    max_interval_hours
        The manifest's cap (``checkpoint.max_interval_minutes``).

    Returns
    -------
    CheckpointIntervalUsed
        The interval in seconds, and why.
    """
    if save_seconds is None:
        first = min(DEFAULT_FIRST_INTERVAL_SECONDS, max_interval_hours * 3600)
        return CheckpointIntervalUsed(
            interval_seconds=first,
            why=f"no save measured yet: the first checkpoint after {first / 60:.0f} min",
        )
    # A save of no measurable length still costs something; a millisecond keeps the formula defined.
    checkpoint_hours = max(save_seconds, 0.001) / 3600
    fraction = uncovered_fraction(checkpoint_hours, NOTICE_SECONDS / 3600, rate.silent_fraction)
    uncovered_per_hour = rate.interruptions_per_hour * fraction
    mtbf = math.inf if uncovered_per_hour <= 0 else 1 / uncovered_per_hour
    choice = auto_interval(checkpoint_hours, mtbf, max_interval_hours)
    outlasts = save_seconds > NOTICE_SECONDS  # the test uncovered_fraction makes, said for the record
    covered = "the save outlasts the 2-minute notice" if outlasts else "the notice covers the save"
    why = f"{choice.why}; {covered}; pool: {rate.basis}"
    return CheckpointIntervalUsed(
        interval_seconds=choice.interval_hours * 3600, why=why[:500], save_seconds=save_seconds
    )


class IntervalAdvisor:
    """Keeps the script's interval file in step with the latest measured save.

    Parameters
    ----------
    path
        The interval file (``SPOTRUN_CHECKPOINT_INTERVAL_FILE`` of the training command).
    rate
        The pool's interruption rate.
    max_interval_hours
        The cap.
    """

    def __init__(self, path: Path, rate: PoolRate, max_interval_hours: float):
        self.path = path
        self.rate = rate
        self.max_interval_hours = max_interval_hours
        self._measured: float | None = None
        self._current: CheckpointIntervalUsed | None = None
        self._lock = threading.Lock()

    @property
    def current(self) -> CheckpointIntervalUsed | None:
        """The interval last written, and why; None before :meth:`update` first ran."""
        return self._current

    def update(self, save_seconds: float | None) -> bool:
        """Recompute from ``save_seconds`` (the latest save's duration) and rewrite the file when it changed.

        Returns
        -------
        bool
            True when the file was (re)written.
        """
        with self._lock:
            if self._current is not None and save_seconds == self._measured:
                return False
            chosen = choose_interval(save_seconds, self.rate, self.max_interval_hours)
            self._measured = save_seconds
            if self._current is not None and chosen.interval_seconds == self._current.interval_seconds:
                self._current = chosen
                return False
            temporary = self.path.with_name(f"{layout.TEMP_PREFIX}{self.path.name}.{os.getpid()}.tmp")
            temporary.write_text(f"{chosen.interval_seconds:.3f}\n")
            temporary.replace(self.path)
            self._current = chosen
            logger.info("checkpoint interval %.1f s: %s", chosen.interval_seconds, chosen.why)
            return True

    def update_quietly(self, save_seconds: float | None) -> None:
        """:meth:`update`, logging instead of raising (the script keeps the interval it has)."""
        try:
            self.update(save_seconds)
        except OSError as exc:
            logger.warning("could not write the checkpoint interval: %s", exc)

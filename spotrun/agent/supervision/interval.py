"""``checkpoint.interval_steps: auto``: the agent decides how long the script trains between checkpoints.

The script reports how long each save took (:class:`spotrun.training.files.ProgressFile`, read by
:class:`~spotrun.agent.supervision.progress.ProgressPublisher`). From that cost ``C`` and the pool's
interruption rate in the train command (:class:`spotrun.model.job.interruption_rate.PoolRate`) the agent
keeps only the interruptions the notice does not cover (the silent ones, or all of them once a save and its
upload outlast the 2-minute notice: the agent times its own uploads,
:attr:`spotrun.agent.supervision.checkpoint_sync.CheckpointSyncer.upload_seconds`), takes Daly's interval for
them (:func:`spotrun.model.checkpoint_interval.auto_interval`) and writes it, in seconds, to the interval
file the script's :meth:`spotrun.training.Run.checkpoint_due` reads. Before any save was measured the
interval is :data:`spotrun.training.files.DEFAULT_FIRST_INTERVAL_SECONDS`: the first checkpoint then comes
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
from spotrun.model.job.attempt import CheckpointIntervalUsed
from spotrun.model.job.interruption_rate import NOTICE_SECONDS, PoolRate
from spotrun.training.files import DEFAULT_FIRST_INTERVAL_SECONDS

logger = logging.getLogger(__name__)


def choose_interval(
    save_seconds: float | None, rate: PoolRate, max_interval_hours: float, upload_seconds: float | None = None
) -> CheckpointIntervalUsed:
    """The interval for a measured save time (None: none measured yet) and the pool's rate.

    The save is the cost ``C`` (training waits for it; the upload runs beside training). On a notice, though,
    the final checkpoint is covered only if it is saved *and* uploaded within the notice, so the upload counts
    in that test.

    Parameters
    ----------
    save_seconds
        How long the script's last save took; None before its first.
    rate
        The pool's interruption rate and silent share (the train command's ``pool_rate``).
    max_interval_hours
        The manifest's cap (``checkpoint.max_interval_minutes``).
    upload_seconds
        How long the agent's last checkpoint upload took; None before one (the save alone is tested).

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
    at_notice_hours = (save_seconds + (upload_seconds or 0.0)) / 3600
    fraction = uncovered_fraction(at_notice_hours, NOTICE_SECONDS / 3600, rate.silent_fraction)
    uncovered_per_hour = rate.interruptions_per_hour * fraction
    mtbf = math.inf if uncovered_per_hour <= 0 else 1 / uncovered_per_hour
    choice = auto_interval(checkpoint_hours, mtbf, max_interval_hours)
    # The test uncovered_fraction makes, said for the record.
    outlasts = at_notice_hours * 3600 > NOTICE_SECONDS
    if upload_seconds is None:
        what, verb = "the save", "outlasts"
    else:
        what, verb = "the save and its upload", "outlast"
    covered = f"{what} {verb} the 2-minute notice" if outlasts else f"the notice covers {what}"
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
        self._current: CheckpointIntervalUsed | None = None
        self._lock = threading.Lock()

    @property
    def current(self) -> CheckpointIntervalUsed | None:
        """The interval last written, and why; None before :meth:`update` first ran."""
        return self._current

    def update(self, save_seconds: float | None, upload_seconds: float | None = None) -> bool:
        """Recompute from the latest save's (and upload's) duration; rewrite the file when the interval changed.

        The upload only decides whether the notice covers the final checkpoint, so a new upload time that does
        not change that answer changes nothing: neither the file nor the why (which the record keeps).

        Returns
        -------
        bool
            True when the file was (re)written.
        """
        with self._lock:
            chosen = choose_interval(save_seconds, self.rate, self.max_interval_hours, upload_seconds)
            if self._current is not None and chosen.interval_seconds == self._current.interval_seconds:
                self._current = chosen  # the same interval; its why may say more (an upload now measured)
                return False
            temporary = self.path.with_name(f"{layout.TEMP_PREFIX}{self.path.name}.{os.getpid()}.tmp")
            temporary.write_text(f"{chosen.interval_seconds:.3f}\n")
            temporary.replace(self.path)
            self._current = chosen
            logger.info("checkpoint interval %.1f s: %s", chosen.interval_seconds, chosen.why)
            return True

    def update_quietly(self, save_seconds: float | None, upload_seconds: float | None = None) -> None:
        """:meth:`update`, logging instead of raising (the script keeps the interval it has)."""
        try:
            self.update(save_seconds, upload_seconds)
        except OSError as exc:
            logger.warning("could not write the checkpoint interval: %s", exc)

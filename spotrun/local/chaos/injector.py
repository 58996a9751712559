"""A background thread that interrupts a job's instance when its training reaches a planned step.

It knows nothing of AWS: it polls a *progress source* (a callable saying which attempt runs where and at
which step) and calls an *interrupter* (``LocalRuntime.interrupt`` in the demo) when the
:class:`~spotrun.local.chaos.plan.InterruptionSchedule` says an interruption is due.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from spotrun.local.chaos.plan import Hit, InterruptionSchedule

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Progress:
    """Where a job's training is: its current attempt, that attempt's instance, and its latest step."""

    attempt: int
    instance_id: str
    step: int | None


# Real seconds between polls by default. Each poll of the demo's progress source is three requests through the
# emulator (the job record, the attempt's progress object, the checkpoint listing): at 0.1 s, eight jobs made 240
# a second, a good part of two cores. At 0.25 s an interruption lands within about a dozen steps of its plan at
# the example's 0.02 s a step (it takes effect a few dozen steps later anyway: the agent polls IMDS).
POLL_SECONDS = 0.25

# Returns None while no attempt is training.
ProgressSource = Callable[[], Progress | None]
# Called with an instance id; raises when the instance cannot be interrupted.
Interrupter = Callable[[str], object]
# Called with the hit and an error message (None when the interruption was sent).
HitListener = Callable[[Hit, str | None], None]
ProgressListener = Callable[[Progress], None]


class Injector:
    """Polls a progress source and interrupts the current attempt's instance at each planned step.

    Parameters
    ----------
    schedule
        The planned interruptions.
    progress
        Called on every poll; exceptions are logged and the poll skipped.
    interrupt
        Called with the instance id of each due attempt. ``KeyError``, ``ValueError`` and ``RuntimeError``
        (unknown instance, on-demand instance, ...) are reported to ``on_interrupt`` as an error: the planned
        step is used up either way.
    poll_seconds
        Real seconds between polls. The thread stops polling once every planned step is used up, unless
        ``on_progress`` listens.
    on_interrupt
        Called after each interruption was sent (error None) or refused (error message).
    on_progress
        Called whenever the observed progress changes.
    """

    def __init__(
        self,
        schedule: InterruptionSchedule,
        progress: ProgressSource,
        interrupt: Interrupter,
        *,
        poll_seconds: float = POLL_SECONDS,
        on_interrupt: HitListener | None = None,
        on_progress: ProgressListener | None = None,
    ):
        if poll_seconds <= 0:
            raise ValueError("poll_seconds must be positive")
        self.schedule = schedule
        self._progress = progress
        self._interrupt = interrupt
        self.poll_seconds = poll_seconds
        self._on_interrupt = on_interrupt
        self._on_progress = on_progress
        self._last: Progress | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> Hit | None:
        """Observe the progress once and inject the interruption that is due, if any.

        Returns
        -------
        Hit or None
            The interruption decided by this poll (sent, or refused by the interrupter).
        """
        try:
            progress = self._progress()
        except Exception:
            logger.exception("cannot read the job's progress")
            return None
        if progress is None:
            return None
        if progress != self._last:
            self._last = progress
            if self._on_progress is not None:
                self._on_progress(progress)
        hit = self.schedule.observe(progress.attempt, progress.instance_id, progress.step)
        if hit is None:
            return None
        error: str | None = None
        try:
            self._interrupt(hit.instance_id)
        except (KeyError, ValueError, RuntimeError) as exc:
            error = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
            logger.warning("could not interrupt %s: %s", hit.instance_id, error)
        if self._on_interrupt is not None:
            self._on_interrupt(hit, error)
        return hit

    @property
    def finished(self) -> bool:
        """Whether polling has nothing left to do: no planned step is pending and nobody listens to progress."""
        return not self.schedule.pending and self._on_progress is None

    def _run(self) -> None:
        # Each poll reads the job store and S3 through the emulator (three requests): with several jobs at once,
        # polls that can decide nothing more would be a good part of the emulator's load.
        while not self.finished and not self._stop.wait(self.poll_seconds):
            try:
                self.poll_once()
            except Exception:  # a listener failed; keep watching
                logger.exception("interruption injector: poll failed")

    def start(self) -> Injector:
        """Start polling in a daemon thread (idempotent)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="interruption-injector", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop polling and wait for the thread (idempotent)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def __enter__(self) -> Injector:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

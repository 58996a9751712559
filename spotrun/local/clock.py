"""Scaled time of the emulator: one factor shrinks boot delays, notices and (via Settings) workflow waits."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any


def utc_now() -> dt.datetime:
    """The current time in UTC."""
    return dt.datetime.now(dt.UTC)


def rfc3339(when: dt.datetime) -> str:
    """Format ``when`` the way AWS event envelopes and IMDS do (``2024-01-01T12:00:00Z``)."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    """Scales simulated durations, runs delayed actions on timers, and tells the emulator's time.

    :meth:`now` is the emulator's wall clock: what AWS's own clock would read (credentials and sessions expire
    by it). It follows real time, so clients' own expiry checks (botocore's refresh) agree with it, and
    :meth:`advance` moves it forward (a test meets an expired session without waiting an hour).

    Parameters
    ----------
    time_scale
        Real seconds per simulated second (0.02: a 120 s notice lasts 2.4 s).
    """

    def __init__(self, time_scale: float):
        if time_scale <= 0:
            raise ValueError("time_scale must be positive")
        self.time_scale = time_scale
        self._timers: set[threading.Timer] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._offset = dt.timedelta()

    def now(self) -> dt.datetime:
        """The emulator's current time, in UTC."""
        return utc_now() + self._offset

    def advance(self, seconds: float) -> None:
        """Move the emulator's time ``seconds`` forward (timers keep their real schedule)."""
        if seconds < 0:
            raise ValueError("the emulator's time only moves forward")
        with self._lock:
            self._offset += dt.timedelta(seconds=seconds)

    def scaled(self, seconds: float) -> float:
        """Real seconds that ``seconds`` of simulated time last."""
        return seconds * self.time_scale

    def call_later(self, seconds: float, action: Callable[..., Any], *args: Any) -> threading.Timer | None:
        """Run ``action(*args)`` after ``seconds`` of simulated time, on a daemon timer thread.

        Returns
        -------
        threading.Timer or None
            The timer, or None once the clock is closed (the action is then dropped).
        """

        def run() -> None:
            with self._lock:
                self._timers.discard(timer)
            action(*args)

        timer = threading.Timer(self.scaled(seconds), run)
        timer.daemon = True
        with self._lock:
            if self._closed:
                return None
            self._timers.add(timer)
        timer.start()
        return timer

    def close(self) -> None:
        """Cancel every pending action and refuse new ones."""
        with self._lock:
            self._closed = True
            timers, self._timers = self._timers, set()
        for timer in timers:
            timer.cancel()

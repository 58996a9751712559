"""A background thread that runs an action every few seconds (heartbeats, checkpoint sync, IMDS polling)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType

logger = logging.getLogger(__name__)


class Ticker:
    """Run ``action`` every ``interval`` seconds in a daemon thread until stopped.

    An exception from ``action`` is logged and the ticking goes on: one failed heartbeat or upload must not
    end the step. ``action`` returning False stops the ticker.

    Parameters
    ----------
    interval
        Seconds between the end of one run and the start of the next.
    action
        What to run.
    name
        Thread name, for logs.
    immediately
        Run once as soon as the thread starts, instead of after the first interval.
    """

    def __init__(self, interval: float, action: Callable[[], object], name: str, *, immediately: bool = True):
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.interval = interval
        self.action = action
        self.immediately = immediately
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> Ticker:
        """Start the thread; returns self."""
        self._thread.start()
        return self

    def trigger(self) -> None:
        """Run the action now rather than at the next interval."""
        self._wake.set()

    def stop(self, timeout: float | None = None) -> None:
        """Stop ticking and wait (up to ``timeout``) for a run in progress to end."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _loop(self) -> None:
        first = self.immediately
        while not self._stop.is_set():
            if not first:
                self._wake.wait(self.interval)
                self._wake.clear()
                if self._stop.is_set():
                    return
            first = False
            try:
                if self.action() is False:
                    return
            except Exception:
                logger.exception("%s: periodic action failed", self._thread.name)

    def __enter__(self) -> Ticker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

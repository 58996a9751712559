"""Spot interruption and rebalance notices, and the thread that watches for them during training."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Literal, Protocol

from spotrun.agent.imds import ImdsClient, ImdsError
from spotrun.agent.periodic import Ticker

logger = logging.getLogger(__name__)

NoticeKind = Literal["interruption", "rebalance"]


@dataclass(frozen=True)
class Notice:
    """Something that threatens the instance.

    ``interruption``: the instance is going away (IMDS ``spot/instance-action``, or the agent itself got a
    termination signal); ``time`` is when, if known. ``rebalance``: a recommendation only.
    """

    kind: NoticeKind
    source: str
    action: str | None = None
    time: datetime | None = None

    def seconds_left(self, now: datetime | None = None) -> float | None:
        """Seconds until :attr:`time`, or None when it is unknown."""
        if self.time is None:
            return None
        reference = now or datetime.now(UTC)
        when = self.time if self.time.tzinfo else self.time.replace(tzinfo=UTC)
        return (when - reference).total_seconds()

    def describe(self) -> str:
        """A short human-readable description."""
        if self.kind == "rebalance":
            return f"rebalance recommendation ({self.source})"
        if self.action is None:
            return f"interruption ({self.source})"
        when = f" at {self.time.isoformat()}" if self.time else ""
        return f"spot interruption: {self.action or 'terminate'}{when} ({self.source})"


class NoticeSource(Protocol):
    """Where notices come from; polled every few seconds."""

    def poll(self) -> Notice | None:
        """The current notice (an interruption wins over a rebalance), or None."""


class ImdsNotices:
    """:class:`NoticeSource` reading IMDSv2."""

    def __init__(self, client: ImdsClient):
        self.client = client

    def poll(self) -> Notice | None:
        """Check ``spot/instance-action``, then ``events/recommendations/rebalance``."""
        action = self.client.spot_instance_action()
        if action is not None:
            return Notice("interruption", "imds", action=action.action, time=action.time)
        rebalance = self.client.rebalance_recommendation()
        if rebalance is not None:
            return Notice("rebalance", "imds", time=rebalance.notice_time)
        return None


class NoticeWatcher:
    """Polls a :class:`NoticeSource` in a background thread and holds the first interruption notice.

    The training supervisor only asks :meth:`interruption`; it does not care whether the notice came from
    IMDS or from :meth:`interrupt` (the agent's own SIGTERM handler, a notice sent through SSM, or a test). The
    first interruption wins: a later one, from any source, starts nothing more.

    Parameters
    ----------
    source
        What to poll; None to only accept :meth:`interrupt`.
    poll_seconds
        Seconds between polls.
    on_rebalance
        Called once, on the first rebalance recommendation (the agent uses it to sync checkpoints early).
    """

    def __init__(
        self,
        source: NoticeSource | None,
        poll_seconds: float,
        on_rebalance: Callable[[Notice], None] | None = None,
    ):
        self.source = source
        self.on_rebalance = on_rebalance
        self._interruption: Notice | None = None
        self._rebalance_seen = False
        # Reentrant: signal handlers call interrupt() in the main thread, which may hold the lock right then.
        self._lock = threading.RLock()
        self._unreachable_logged = False
        self._ticker = Ticker(poll_seconds, self._poll_once, "imds-watch") if source is not None else None

    def interruption(self) -> Notice | None:
        """The interruption notice, once there is one."""
        with self._lock:
            return self._interruption

    def interrupt(self, notice: Notice) -> bool:
        """Record an interruption notice; returns False when an earlier one was already recorded (it wins)."""
        with self._lock:
            if self._interruption is not None:
                return False
            self._interruption = notice
        logger.warning("interruption notice: %s", notice.describe())
        return True

    def _poll_once(self) -> bool:
        assert self.source is not None
        try:
            notice = self.source.poll()
        except ImdsError as exc:
            # A missing metadata service must not stop training; say so once, not every few seconds.
            if not self._unreachable_logged:
                logger.warning("cannot poll for spot notices: %s", exc)
                self._unreachable_logged = True
            return True
        if notice is None:
            return True
        if notice.kind == "interruption":
            self.interrupt(notice)
            return False  # nothing more to learn; the supervisor takes it from here
        if not self._rebalance_seen:
            self._rebalance_seen = True
            logger.warning("%s", notice.describe())
            if self.on_rebalance is not None:
                self.on_rebalance(notice)
        return True

    def start(self) -> NoticeWatcher:
        """Start polling (if there is a source)."""
        if self._ticker is not None:
            self._ticker.start()
        return self

    def stop(self) -> None:
        """Stop polling."""
        if self._ticker is not None:
            self._ticker.stop(timeout=5)

    def __enter__(self) -> NoticeWatcher:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

"""EventBridge Scheduler for the emulator: moto stores schedules but never fires them; this loop does.

Time is the runtime's scaled time: the loop's clock starts at the real time and runs ``1 / time_scale`` times
faster, so ``rate(1 minute)`` at a time scale of 0.02 fires every 1.2 real seconds. A schedule is first seen by
a poll (its simulated creation time); a rate fires every period after it, a cron at each matching minute
(:func:`spotrun.model.manifest.schedule_expressions.next_fire`; expressions with ``L``, ``W`` or ``#`` are
not fired). Only ENABLED schedules fire. A firing does what Scheduler does: it fills the context attributes
of the schedule's Input and invokes its target (here, in-process through the Lambda patch) once; errors are logged.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spotrun.local.clock import Clock, rfc3339
from spotrun.model.manifest.schedule_expressions import InvalidExpression, next_fire

logger = logging.getLogger(__name__)
POLL_SECONDS = 0.1  # real seconds: the shortest wait between looks at the schedules
# Simulated seconds between looks: a quarter of what AWS promises, as "all schedule types on EventBridge Scheduler
# invoke their targets with 60 second precision" (https://docs.aws.amazon.com/scheduler/latest/UserGuide/schedule-types.html).
# Each look is a ListSchedules call (and a GetSchedule per schedule) through the emulator: at 0.1 s whatever the
# time scale, an idle runtime made ten a second.
SIMULATED_POLL_SECONDS = 15.0
MAX_POLL_SECONDS = 1.0  # real seconds: the longest wait, so that a runtime at real time stops promptly


@dataclass
class _Due:
    expression: str
    first_seen: dt.datetime
    next_at: dt.datetime | None


class LocalScheduler:
    """Fires the schedules of one group, in scaled time.

    Parameters
    ----------
    clock
        The runtime's clock (its time scale).
    client
        ``service -> boto3 client`` on the emulator.
    group
        The schedule group to fire.
    """

    def __init__(self, clock: Clock, client: Callable[[str], Any], group: str):
        self._clock, self._client, self._group = clock, client, group
        self._origin = (dt.datetime.now(dt.UTC), time.monotonic())
        self._due: dict[str, _Due] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired: list[tuple[str, str]] = []  # (schedule, scheduled time), in order

    def now(self) -> dt.datetime:
        """The scheduler's (scaled) current time."""
        wall, mono = self._origin
        return wall + dt.timedelta(seconds=(time.monotonic() - mono) / self._clock.time_scale)

    def start(self) -> None:
        """Start polling on a daemon thread (nothing to do when the deployment has no schedule group)."""
        groups = self._client("scheduler").list_schedule_groups().get("ScheduleGroups", [])
        if self._group not in {group["Name"] for group in groups}:
            return
        self._thread = threading.Thread(target=self._run, name="local-scheduler", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop polling; a firing in progress finishes first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    @property
    def poll_seconds(self) -> float:
        """Real seconds between looks at the schedules: 15 simulated seconds, within 0.1 and 1 real second."""
        return min(MAX_POLL_SECONDS, max(POLL_SECONDS, self._clock.scaled(SIMULATED_POLL_SECONDS)))

    def _run(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.tick()
            except Exception:
                logger.exception("local scheduler: a poll failed")

    def tick(self) -> None:
        """Fire every enabled schedule whose time has come (at most once per poll)."""
        now = self.now()
        scheduler = self._client("scheduler")
        names = {
            item["Name"] for item in scheduler.list_schedules(GroupName=self._group).get("Schedules", [])
        }
        self._due = {name: due for name, due in self._due.items() if name in names}
        for name in sorted(names):
            detail = scheduler.get_schedule(Name=name, GroupName=self._group)
            expression = detail["ScheduleExpression"]
            timezone = detail.get("ScheduleExpressionTimezone") or "UTC"
            due = self._due.get(name)
            if due is None or due.expression != expression:
                due = self._due[name] = _Due(expression, now, self._next(expression, timezone, now, now))
            if detail.get("State", "ENABLED") != "ENABLED" or due.next_at is None or now < due.next_at:
                continue
            scheduled = due.next_at
            due.next_at = self._next(expression, timezone, scheduled, due.first_seen)
            self._invoke(detail, scheduled)

    @staticmethod
    def _next(expression: str, timezone: str, after: dt.datetime, start: dt.datetime) -> dt.datetime | None:
        try:
            return next_fire(expression, after, timezone, start=start)
        except InvalidExpression as exc:
            logger.warning("local scheduler does not fire %s: %s", expression, exc)
            return None

    def fire(self, name: str) -> dict[str, Any]:
        """Fire ``name`` now, whatever its state and expression; return the target's answer."""
        detail = self._client("scheduler").get_schedule(Name=name, GroupName=self._group)
        return self._invoke(detail, self.now())

    def _invoke(self, detail: dict[str, Any], scheduled: dt.datetime) -> dict[str, Any]:
        target = detail["Target"]
        scheduled_time = rfc3339(scheduled)
        text = target.get("Input") or "{}"
        for attribute, value in {
            "schedule-arn": detail["Arn"],
            "scheduled-time": scheduled_time,
            "execution-id": uuid.uuid4().hex[:16],
            "attempt-number": "1",
        }.items():
            text = text.replace(f"<aws.scheduler.{attribute}>", value)
        self.fired.append((detail["Name"], scheduled_time))
        answer = self._client("lambda").invoke(FunctionName=target["Arn"], Payload=text.encode())
        payload = json.loads(answer["Payload"].read() or b"null")
        if answer.get("FunctionError"):
            logger.error("schedule %s: its target failed: %s", detail["Name"], payload)
        return {"error": answer.get("FunctionError"), "payload": payload}

"""`schedule.timezone`: the schedule is created in it, its next run is computed in it, the emulator fires in it."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest

from spotrun.control.schedules.firing import create_schedule
from spotrun.local.clock import Clock
from spotrun.local.scheduler import LocalScheduler
from spotrun.model.errors import RequestRejected
from spotrun.model.manifest.schema import JobManifest
from tests.unit.fakes import FakeObjects
from tests.unit.test_schedules import BUCKET, FakeSchedules

# Monday 30 November 2026, midnight UTC: 01:00 in Paris (UTC+1 in winter), 09:00 in Tokyo (UTC+9).
T0 = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def _manifest(timezone: str) -> JobManifest:
    return JobManifest.model_validate(
        {
            "name": "nightly",
            "training": {"command": ["python", "train.py"]},
            "schedule": {"expression": "cron(0 3 ? * MON-FRI *)", "timezone": timezone},
        }
    )


def test_the_schedule_is_created_in_the_manifests_time_zone_and_its_next_run_is_computed_there():
    # Given a weekday 03:00 schedule in Paris
    schedules = FakeSchedules()

    # When it is created
    view = create_schedule(
        _manifest("Europe/Paris"),
        schedules=schedules,
        objects=FakeObjects(),
        bucket=BUCKET,
        archive_buckets=(),
        now=T0,
    )

    # Then Scheduler is given that zone, and the next run is 03:00 Paris time, 02:00 UTC
    expression, timezone, _payload = schedules.created["nightly"]
    assert (expression, timezone) == ("cron(0 3 ? * MON-FRI *)", "Europe/Paris")
    assert view.timezone == "Europe/Paris"
    assert view.next_run == dt.datetime(2026, 11, 30, 2, 0, tzinfo=dt.UTC)


def test_an_unknown_time_zone_is_refused_and_creates_nothing():
    # Given a manifest whose time zone is not an IANA name (the manifest's own check lets any text through)
    objects, schedules = FakeObjects(), FakeSchedules()

    # When a schedule is created from it
    with pytest.raises(RequestRejected) as refused:
        create_schedule(
            _manifest("Mars/Olympus"),
            schedules=schedules,
            objects=objects,
            bucket=BUCKET,
            archive_buckets=(),
            now=T0,
        )

    # Then it is a 422 naming the zone, and nothing was stored or created
    assert refused.value.status == 422
    assert "Mars/Olympus" in refused.value.message
    assert objects.objects == {}
    assert schedules.created == {}


class _SchedulerApi:
    """The emulator's Scheduler as LocalScheduler reads it: one enabled schedule."""

    def __init__(self, expression: str, timezone: str) -> None:
        self.detail = {
            "Name": "nightly",
            "Arn": "arn:aws:scheduler:us-east-1:123456789012:schedule/spotrun/nightly",
            "ScheduleExpression": expression,
            "ScheduleExpressionTimezone": timezone,
            "State": "ENABLED",
            "Target": {"Arn": "arn:aws:lambda:us-east-1:123456789012:function:run", "Input": "{}"},
        }

    def list_schedules(self, GroupName: str) -> dict[str, Any]:  # noqa: N803 - boto3's spelling
        return {"Schedules": [{"Name": "nightly"}]}

    def get_schedule(self, Name: str, GroupName: str) -> dict[str, Any]:  # noqa: N803
        return self.detail


def test_the_emulators_scheduler_fires_a_cron_at_its_time_in_the_schedules_zone():
    # Given a daily 03:00 schedule in Tokyo (18:00 UTC), seen by the emulator's scheduler at 17:00 UTC
    api = _SchedulerApi("cron(0 3 * * ? *)", "Asia/Tokyo")
    scheduler = LocalScheduler(Clock(1.0), lambda service: api, "spotrun")
    fired: list[dt.datetime] = []
    scheduler._invoke = lambda detail, scheduled: fired.append(scheduled) or {}  # type: ignore[method-assign]
    seen_at = dt.datetime(2026, 11, 30, 17, 0, tzinfo=dt.UTC)

    # When it polls at 17:00, 17:59 and 18:00:30 UTC
    for minutes in (0, 59, 60.5):
        scheduler.now = lambda minutes=minutes: seen_at + dt.timedelta(minutes=minutes)  # type: ignore[method-assign]
        scheduler.tick()

    # Then it fired once, for 03:00 in Tokyo
    assert fired == [dt.datetime(2026, 12, 1, 3, 0, tzinfo=dt.timezone(dt.timedelta(hours=9)))]


@pytest.mark.parametrize(("time_scale", "expected"), [(0.02, 0.3), (0.001, 0.1), (1.0, 1.0)])
def test_the_emulators_scheduler_looks_every_15_simulated_seconds_within_bounds(time_scale, expected):
    # Given the emulator's scheduler at a time scale
    scheduler = LocalScheduler(Clock(time_scale), lambda service: None, "spotrun")
    # When it waits between looks at the schedules
    # Then it waits 15 simulated seconds (well within AWS's 60-second precision), never under 0.1 s nor over 1 s
    assert scheduler.poll_seconds == pytest.approx(expected)


class CountingScheduler:
    """A Scheduler API with one group and no schedule, counting the ListSchedules calls."""

    def __init__(self) -> None:
        self.lists = 0

    def list_schedule_groups(self) -> dict[str, Any]:
        return {"ScheduleGroups": [{"Name": "spotrun"}]}

    def list_schedules(self, GroupName: str) -> dict[str, Any]:  # noqa: N803 - boto3's parameter name
        self.lists += 1
        return {"Schedules": []}


def test_the_emulators_scheduler_thread_waits_its_poll_between_looks():
    # Given the emulator's scheduler at the e2e tests' time scale (a look every 0.3 s)
    api = CountingScheduler()
    scheduler = LocalScheduler(Clock(0.02), lambda service: api, "spotrun")
    # When its thread runs for half a second
    scheduler.start()
    try:
        threading.Event().wait(0.5)
    finally:
        scheduler.close()
    # Then it looked once or twice, not five times (as at 0.1 s)
    assert 1 <= api.lists <= 2

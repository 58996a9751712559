"""One firing of a schedule (``run_scheduled``) over the ports' fakes: started, skipped, or unreadable."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from spotrun.control.schedules.firing import CONTEXT, Invocation, create_schedule, run_scheduled
from spotrun.control.schedules.run_records import RunRecord
from spotrun.model.manifest.schema import JobManifest
from tests.unit.fakes import FakeObjects, FakeWorkflows, InMemoryJobStore

T0 = datetime(2026, 12, 1, 3, tzinfo=UTC)
BUCKET = "jobs"
MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:spotrun-job"


class FakeRunRecords:
    """:class:`spotrun.control.schedules.run_records.RunRecords` in a dict, recording each scheduled time once."""

    def __init__(self) -> None:
        self.recorded: dict[tuple[str, str], RunRecord] = {}
        self.success: dict[str, RunRecord] = {}

    def add_run(self, run: RunRecord) -> bool:
        return self.recorded.setdefault((run.schedule, run.scheduled_time), run) is run

    def get_run(self, schedule: str, scheduled_time: str) -> RunRecord | None:
        return self.recorded.get((schedule, scheduled_time))

    def runs(self, schedule: str) -> list[RunRecord]:
        found = [run for (name, _), run in self.recorded.items() if name == schedule]
        return sorted(found, key=lambda run: run.scheduled_time, reverse=True)

    def last_success(self, schedule: str) -> RunRecord | None:
        return self.success.get(schedule)

    def set_last_success(self, run: RunRecord) -> None:
        self.success[run.schedule] = run


class FakeSchedules:
    def __init__(self) -> None:
        self.created: dict[str, dict] = {}

    def create(self, name, expression, timezone, payload):
        self.created[name] = payload
        return True


class World:
    """The ports a firing uses, and a schedule created from a manifest whose inputs exist."""

    def __init__(self) -> None:
        self.objects, self.records = FakeObjects(), FakeRunRecords()
        self.store, self.workflows = InMemoryJobStore(), FakeWorkflows()
        self.objects.objects[(BUCKET, "data/a.csv")] = b"1"
        manifest = JobManifest.model_validate(
            {
                "name": "nightly",
                "data": {"inputs": [{"source": f"s3://{BUCKET}/data/", "destination": "."}]},
                "training": {"command": ["python", "-c", "print(1)"]},
                "schedule": {"expression": "rate(1 day)"},
            }
        )
        schedules = FakeSchedules()
        create_schedule(
            manifest, schedules=schedules, objects=self.objects, bucket=BUCKET, archive_buckets=(), now=T0
        )
        self.manifest_key = schedules.created["nightly"]["manifest_key"]

    def fire(self, scheduled_time: str = "2026-12-01T03:00:00Z") -> RunRecord:
        """What Scheduler's delivery of one firing does."""
        payload = {
            "schedule": "nightly",
            "manifest_key": self.manifest_key,
            **{name: f"filled {name}" for name in CONTEXT},
            "scheduled_time": scheduled_time,
        }
        return run_scheduled(
            Invocation.model_validate(payload),
            bucket=BUCKET,
            objects=self.objects,
            records=self.records,
            store=self.store,
            workflows=self.workflows,
            state_machine_arn=MACHINE,
            time_scale=1.0,
            now=T0,
        )


def test_a_firing_of_a_readable_manifest_starts_its_job():
    # Given a schedule whose manifest is in the bucket
    world = World()
    # When it fires
    run = world.fire()
    # Then its job is started and the firing recorded with the inputs' fingerprint
    assert run.outcome == "started"
    assert run.job_id is not None
    assert run.fingerprint
    assert len(world.workflows.started) == 1


def test_a_firing_whose_manifest_was_deleted_is_recorded_as_skipped_saying_why():
    # Given a schedule whose stored manifest has been deleted from the jobs bucket
    world = World()
    del world.objects.objects[(BUCKET, world.manifest_key)]
    # When it fires, twice (Scheduler delivers at least once)
    first = world.fire()
    again = world.fire()
    # Then no error escapes, nothing starts, and the one recorded run says the manifest is gone and what to do
    assert first == again
    assert (first.outcome, first.job_id, first.fingerprint) == ("skipped", None, None)
    assert f"s3://{BUCKET}/{world.manifest_key} no longer exists" in (first.reason or "")
    assert "create it again" in (first.reason or "")
    assert world.records.runs("nightly") == [first]
    assert world.workflows.started == {}


def test_a_firing_whose_manifest_no_longer_validates_is_recorded_as_skipped_naming_the_problem():
    # Given a schedule whose stored manifest no longer validates (here: a field removed by hand)
    world = World()
    document = json.loads(world.objects.objects[(BUCKET, world.manifest_key)])
    del document["training"]
    world.objects.objects[(BUCKET, world.manifest_key)] = json.dumps(document).encode()
    # When it fires
    run = world.fire()
    # Then it is a recorded skip naming the field, and nothing starts
    assert run.outcome == "skipped"
    assert "no longer validates" in (run.reason or "")
    assert "training" in (run.reason or "")
    assert world.workflows.started == {}


def test_a_started_firing_delivered_again_after_its_manifest_was_deleted_keeps_its_record():
    # Given a firing that started its job, then the manifest deleted
    world = World()
    started = world.fire()
    del world.objects.objects[(BUCKET, world.manifest_key)]
    # When Scheduler delivers the same firing again
    again = world.fire()
    # Then the answer is the recorded start, and nothing else starts
    assert again == started
    assert len(world.workflows.started) == 1


def test_a_later_firing_after_the_manifest_is_deleted_is_skipped_and_the_earlier_start_stays():
    # Given a started firing, then the manifest deleted
    world = World()
    started = world.fire()
    del world.objects.objects[(BUCKET, world.manifest_key)]
    # When the next firing comes
    later = world.fire("2026-12-02T03:00:00Z")
    # Then it is skipped, and the history holds both, newest first
    assert later.outcome == "skipped"
    assert world.records.runs("nightly") == [later, started]

from datetime import UTC, datetime

import pytest

from spotrun.control.schedules.firing import RunRecord, create_schedule, fingerprint, should_skip
from spotrun.model.errors import RequestRejected
from spotrun.model.manifest.schema import JobManifest
from tests.unit.fakes import FakeObjects

T0 = datetime(2026, 11, 30, tzinfo=UTC)
BUCKET = "jobs"


def a_manifest(only_if_data_changed=True, expression="rate(1 day)") -> JobManifest:
    return JobManifest.model_validate(
        {
            "name": "nightly",
            "data": {"inputs": [{"source": f"s3://{BUCKET}/data/", "destination": "."}]},
            "training": {"code": f"s3://{BUCKET}/code/", "command": ["python", "train.py"]},
            "schedule": {"expression": expression, "only_if_data_changed": only_if_data_changed},
        }
    )


def objects_with(**files: bytes) -> FakeObjects:
    objects = FakeObjects()
    for key, body in files.items():
        objects.objects[(BUCKET, key.replace("__", "/"))] = body
    return objects


def a_success(print_: str) -> RunRecord:
    return RunRecord(
        schedule="nightly",
        scheduled_time="2026-11-29T00:00:00Z",
        recorded_at=T0,
        outcome="started",
        job_id="nightly-1",
        fingerprint=print_,
    )


class FakeSchedules:
    def __init__(self):
        self.created: dict[str, tuple] = {}

    def create(self, name, expression, timezone, payload):
        if name in self.created:
            return False
        self.created[name] = (expression, timezone, payload)
        return True

    def list(self):
        return []

    def delete(self, name):
        return self.created.pop(name, None) is not None


def test_the_fingerprint_changes_with_any_input_or_code_object_and_only_then():
    # Given inputs and code, and their fingerprint
    objects = objects_with(data__a=b"1", data__b=b"2", code__train=b"x", other__c=b"3")
    manifest = a_manifest()
    before = fingerprint(manifest, objects)
    # When an object outside the inputs changes, Then the fingerprint stays
    objects.objects[(BUCKET, "other/c")] = b"changed"
    assert fingerprint(manifest, objects) == before
    # When a data object changes, or the code does, Then it differs
    objects.objects[(BUCKET, "data/b")] = b"22"
    after_data = fingerprint(manifest, objects)
    assert after_data != before
    objects.objects[(BUCKET, "code/new")] = b"y"
    assert fingerprint(manifest, objects) not in {before, after_data}


@pytest.mark.parametrize(
    ("only_if_data_changed", "last", "skipped"),
    [(True, "same", True), (True, "different", False), (True, None, False), (False, "same", False)],
)
def test_a_run_is_skipped_only_when_asked_and_the_inputs_equal_the_last_success(
    only_if_data_changed, last, skipped
):
    # Given the current fingerprint and the last successful run's
    last_success = None if last is None else a_success("fp" if last == "same" else "other")
    # When the skip is decided
    reason = should_skip(a_manifest(only_if_data_changed), "fp", last_success)
    # Then it is skipped exactly when the data did not change, with a reason naming the last success
    assert (reason is not None) == skipped
    if skipped:
        assert "nightly-1" in reason


def test_an_invalid_expression_creates_nothing_and_names_the_problem():
    # Given a manifest whose cron has a minute out of range (the manifest's syntax check lets it through)
    manifest = a_manifest(expression="cron(61 3 * * ? *)")
    objects, schedules = FakeObjects(), FakeSchedules()
    # When a schedule is created from it
    with pytest.raises(RequestRejected) as refused:
        create_schedule(
            manifest, schedules=schedules, objects=objects, bucket=BUCKET, archive_buckets=(), now=T0
        )
    # Then the refusal is a 4xx naming the field, and nothing was stored or created
    assert refused.value.status == 422
    assert "minutes must be 0-59" in refused.value.message
    assert objects.objects == {}
    assert schedules.created == {}


def test_a_second_schedule_of_the_same_name_is_refused_and_keeps_the_first_manifest():
    # Given a schedule
    objects, schedules = FakeObjects(), FakeSchedules()
    create_schedule(
        a_manifest(), schedules=schedules, objects=objects, bucket=BUCKET, archive_buckets=(), now=T0
    )
    first_key = schedules.created["nightly"][2]["manifest_key"]
    first = objects.objects[(BUCKET, first_key)]
    # When another manifest of the same name is scheduled
    with pytest.raises(RequestRejected) as refused:
        create_schedule(
            a_manifest(False), schedules=schedules, objects=objects, bucket=BUCKET, archive_buckets=(), now=T0
        )
    # Then it is a conflict, and the first schedule's manifest is untouched
    assert refused.value.status == 409
    assert objects.objects[(BUCKET, first_key)] == first

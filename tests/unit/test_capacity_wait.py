"""Waiting for capacity: each pool's last error, since when, and capacity.max_wait_minutes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from spotrun.cli.display.summary import capacity_wait_text, status_text
from spotrun.control.capacity.acquire import acquire_instance
from spotrun.control.store import update_job
from spotrun.control.views.job_json import job_record
from spotrun.control.views.jobs import list_jobs
from spotrun.model.capacity.candidates import Pool
from spotrun.model.capacity.fleet_request import FleetLaunchError
from spotrun.model.capacity.wait import (
    MAX_MESSAGE_CHARS,
    MAX_POOLS_KEPT,
    CapacityWait,
    check_max_wait,
    still_waiting,
)
from spotrun.model.errors import CapacityMaxWaitExceeded, CapacityUnavailable
from spotrun.model.job.record import JobError, JobStatus, ManifestSource, new_job, transition
from spotrun.model.manifest.parse import manifest_json_schema, parse_manifest_text
from spotrun.model.manifest.schema import JobManifest
from spotrun.model.timing import workflow_timing
from tests.unit.fakes import FakeCompute, InMemoryJobStore

T0 = datetime(2026, 11, 30, 17, 2, tzinfo=UTC)
SUBNETS = {"subnet-a": "us-east-1a", "subnet-b": "us-east-1b"}
SCHEMA = jsonschema.Draft202012Validator(json.loads(manifest_json_schema()))


def error(code: str, instance_type: str = "g5.xlarge", zone: str = "us-east-1a", lifecycle: str = "spot"):
    return FleetLaunchError(code, f"{code} message", Pool(instance_type, zone), lifecycle)


def manifest_text(capacity: str = "{}") -> str:
    return (
        f"name: tiny\nresources: {{gpu_names: [a10g]}}\ncapacity: {capacity}\n"
        "training: {command: [python, t.py]}\n"
    )


def job_in(store: InMemoryJobStore, capacity: str = "{}") -> None:
    manifest = parse_manifest_text(manifest_text(capacity))
    store.create(new_job("tiny-1", "tiny", ManifestSource(bucket="b", key="k"), manifest, T0))


def acquire(store, compute, now=T0, capacity="{}"):
    return acquire_instance(
        job_id="tiny-1",
        store=store,
        compute=compute,
        subnet_ids=tuple(SUBNETS),
        launch_template_name="spotrun-agent",
        timing=workflow_timing(parse_manifest_text(manifest_text(capacity)), 1.0),
        now=now,
    )


class PricedOut(FakeCompute):
    """g5.xlarge in us-east-1a above the max price; every other pool without capacity; on-demand none either."""

    def create_fleet(self, request: dict[str, Any]) -> dict[str, Any]:
        self.unavailable = True
        answer = super().create_fleet(request)
        for item in answer["Errors"]:
            override = item["LaunchTemplateAndOverrides"]["Overrides"]
            if item["Lifecycle"] == "spot" and (override["InstanceType"], override["SubnetId"]) == (
                "g5.xlarge",
                "subnet-a",
            ):
                item["ErrorCode"] = "SpotMaxPriceTooLow"
        return answer


# ------------------------------------------------------------------------------------------- the wait record


def test_a_wait_keeps_one_entry_per_pool_with_its_newest_answer_and_its_first_since() -> None:
    # Given a wait begun at T0 on two pools
    wait = still_waiting(
        None, [error("InsufficientInstanceCapacity"), error("SpotMaxPriceTooLow", zone="b")], T0
    )
    # When a later launch answers again for one of them, spot then on-demand
    later = T0 + timedelta(minutes=5)
    again = still_waiting(
        wait,
        [error("SpotMaxPriceTooLow"), error("InsufficientInstanceCapacity", lifecycle="on-demand")],
        later,
    )
    # Then that pool has one entry, its newest answer (on-demand's), first; the other pool keeps its own
    assert again.since == T0
    assert [(e.availability_zone, e.code, e.lifecycle, e.at) for e in again.pools] == [
        ("us-east-1a", "InsufficientInstanceCapacity", "on-demand", later),
        ("b", "SpotMaxPriceTooLow", "spot", T0),
    ]


def test_a_wait_is_bounded_in_pools_and_message_length_and_an_answer_without_a_pool_is_its_note() -> None:
    # Given answers for more pools than a record keeps, a long message, and a refusal naming no pool
    errors = [error("InsufficientInstanceCapacity", f"g5.{n}xlarge") for n in range(MAX_POOLS_KEPT + 20)]
    errors[0] = FleetLaunchError("SpotMaxPriceTooLow", "x" * 1000, Pool("g5.0xlarge", "us-east-1a"), "spot")
    errors.append(FleetLaunchError("InternalError", "try again", None, None))
    # When the wait is noted
    wait = still_waiting(None, errors, T0, note="deadline: wait")
    # Then it keeps the first pools (the request's order), the message cut, and the refusal in its note
    assert len(wait.pools) == MAX_POOLS_KEPT
    assert wait.pools[0].instance_type == "g5.0xlarge"
    assert len(wait.pools[0].message) == MAX_MESSAGE_CHARS
    assert wait.note == "deadline: wait; InternalError: try again"
    # And the stored form refuses more
    with pytest.raises(ValidationError):
        CapacityWait(since=T0, pools=[*wait.pools, wait.pools[0]])


def test_the_reasons_group_pools_by_code_and_say_on_demand() -> None:
    # Given three pools' answers
    wait = still_waiting(
        None,
        [
            error("SpotMaxPriceTooLow", "g4dn.xlarge"),
            error("InsufficientInstanceCapacity", zone="us-east-1a"),
            error("InsufficientInstanceCapacity", zone="us-east-1b"),
            error("InsufficientInstanceCapacity", "g6.xlarge", lifecycle="on-demand"),
        ],
        T0,
    )
    # When they are told, Then each code lists its pools
    assert wait.reasons() == (
        "SpotMaxPriceTooLow in g4dn.xlarge/us-east-1a; "
        "InsufficientInstanceCapacity in g5.xlarge/us-east-1a, g5.xlarge/us-east-1b; "
        "InsufficientInstanceCapacity (on-demand) in g6.xlarge/us-east-1a"
    )


def test_max_wait_counts_the_earlier_waits_and_ends_only_past_it() -> None:
    # Given a wait of 20 minutes after 40 minutes of earlier waits, against 60 minutes
    wait = still_waiting(None, [error("InsufficientInstanceCapacity")], T0)
    # When it is checked at the limit, Then it goes on
    check_max_wait(wait, 2400, 3600, T0 + timedelta(minutes=20), "tiny-1")
    # And past it, Then it ends, naming the limit, the since, the earlier waits and the pools
    with pytest.raises(CapacityMaxWaitExceeded) as raised:
        check_max_wait(wait, 2400, 3600, T0 + timedelta(minutes=20, seconds=1), "tiny-1")
    message = str(raised.value)
    assert type(raised.value).__name__ == "Capacity.MaxWaitExceeded"
    assert "max_wait_minutes (60 min)" in message
    assert "since 2026-11-30T17:02:00+00:00 (with 40.0 min of earlier waits)" in message
    assert message.endswith("InsufficientInstanceCapacity in g5.xlarge/us-east-1a")


# ------------------------------------------------------------------------------------------------ acquire


def test_acquire_notes_the_wait_once_with_each_pools_code_and_clears_it_with_the_instance() -> None:
    # Given a job whose pools are priced out or full, on spot and on-demand
    store, compute = InMemoryJobStore(), PricedOut(zones=SUBNETS)
    job_in(store, "{on_demand_fallback: true}")
    # When it asks three times, a minute apart
    for minute in range(3):
        with pytest.raises(CapacityUnavailable):
            acquire(store, compute, T0 + timedelta(minutes=minute), "{on_demand_fallback: true}")
    # Then the record waits since the first, each pool's last answer on-demand's (asked after spot)
    job = store.get("tiny-1")
    assert job.capacity_wait.since == T0
    assert {e.lifecycle for e in job.capacity_wait.pools} == {"on-demand"}
    assert {e.at for e in job.capacity_wait.pools} == {T0 + timedelta(minutes=2)}
    # And the timeline has the wait's start once
    waits = [c for c in job.timeline if (c.detail or "").startswith("waiting for capacity: ")]
    assert [(c.status, c.at) for c in waits] == [(JobStatus.ACQUIRING, T0)]
    # When capacity comes back, Then the instance clears the wait and its 3 minutes are counted
    compute.create_fleet = FakeCompute.create_fleet.__get__(compute)  # type: ignore[method-assign]
    compute.unavailable = False
    acquire(store, compute, T0 + timedelta(minutes=3), "{on_demand_fallback: true}")
    job = store.get("tiny-1")
    assert job.capacity_wait is None
    assert job.capacity_waited_seconds == 180


def test_a_spot_only_wait_names_the_priced_out_pool() -> None:
    # Given a spot job, one pool above its max price, the others full
    store, compute = InMemoryJobStore(), PricedOut(zones=SUBNETS)
    job_in(store)
    # When it asks
    with pytest.raises(CapacityUnavailable):
        acquire(store, compute)
    # Then the reason of each pool is EC2's code for it
    by_pool = {e.pool: e.code for e in store.get("tiny-1").capacity_wait.pools}
    assert by_pool[Pool("g5.xlarge", "us-east-1a")] == "SpotMaxPriceTooLow"
    assert set(by_pool.values()) == {"SpotMaxPriceTooLow", "InsufficientInstanceCapacity"}


def test_max_wait_minutes_ends_the_wait_and_keeps_it_on_the_record() -> None:
    # Given a job allowed 5 minutes of waiting, and no capacity
    store, compute = InMemoryJobStore(), FakeCompute(zones=SUBNETS)
    job_in(store, "{max_wait_minutes: 5}")
    compute.unavailable = True
    with pytest.raises(CapacityUnavailable):
        acquire(store, compute, T0, "{max_wait_minutes: 5}")
    # When it asks again 5 minutes later, and a second past
    with pytest.raises(CapacityUnavailable):
        acquire(store, compute, T0 + timedelta(minutes=5), "{max_wait_minutes: 5}")
    with pytest.raises(CapacityMaxWaitExceeded, match=r"\(5 min\).*InsufficientInstanceCapacity in g5"):
        acquire(store, compute, T0 + timedelta(minutes=5, seconds=1), "{max_wait_minutes: 5}")
    # Then the wait stays on the record, with that last answer
    wait = store.get("tiny-1").capacity_wait
    assert wait.since == T0
    assert {e.at for e in wait.pools} == {T0 + timedelta(minutes=5, seconds=1)}


def test_the_earlier_waits_count_towards_max_wait_minutes() -> None:
    # Given a job allowed 5 minutes that waited 4 for its first instance, which was then reclaimed
    store, compute = InMemoryJobStore(), FakeCompute(zones=SUBNETS)
    job_in(store, "{max_wait_minutes: 5}")
    compute.unavailable = True
    with pytest.raises(CapacityUnavailable):
        acquire(store, compute, T0, "{max_wait_minutes: 5}")
    compute.unavailable = False
    acquire(store, compute, T0 + timedelta(minutes=4), "{max_wait_minutes: 5}")
    later = T0 + timedelta(hours=1)

    def reclaimed(job):
        ended = job.current_attempt.model_copy(update={"ended_at": later, "end_reason": "interrupted"})
        return transition(job.with_current_attempt(ended), JobStatus.INTERRUPTED, later)

    update_job(
        store,
        "tiny-1",
        lambda job: transition(transition(job, JobStatus.STAGING, later), JobStatus.TRAINING, later),
    )
    update_job(store, "tiny-1", reclaimed)
    # When no capacity is found for a minute and a second
    compute.unavailable = True
    with pytest.raises(CapacityUnavailable):
        acquire(store, compute, later, "{max_wait_minutes: 5}")
    # Then the job has waited 5 minutes and a second in all: it ends
    with pytest.raises(CapacityMaxWaitExceeded, match=r"with 4\.0 min of earlier waits"):
        acquire(store, compute, later + timedelta(minutes=1, seconds=1), "{max_wait_minutes: 5}")


# ------------------------------------------------------------------------------------------------ manifest


@pytest.mark.parametrize("minutes", [0, 1441, 2.5])
def test_max_wait_minutes_out_of_bounds_is_refused_by_the_model_and_the_schema(minutes) -> None:
    # Given a manifest with max_wait_minutes out of its bounds (1 to 1440, whole minutes)
    document = {
        "name": "tiny",
        "training": {"command": ["python", "t.py"]},
        "capacity": {"max_wait_minutes": minutes},
    }
    # When it is validated, Then both refuse it
    with pytest.raises(ValidationError, match="max_wait_minutes"):
        JobManifest.model_validate(document)
    assert not SCHEMA.is_valid(document)


@pytest.mark.parametrize("minutes", [1, 1440])
def test_max_wait_minutes_sets_the_workflows_patience_scaled(minutes) -> None:
    # Given a manifest allowing that long, and one without it
    given = parse_manifest_text(manifest_text(f"{{max_wait_minutes: {minutes}}}"))
    default = parse_manifest_text(manifest_text())
    # When the workflow's timing is derived (scaled by 0.02 in the emulator)
    # Then its patience is that long, scaled; by default an hour, as before
    assert workflow_timing(given, 0.02).capacity_patience_seconds == pytest.approx(minutes * 60 * 0.02)
    assert workflow_timing(default, 1.0).capacity_patience_seconds == 3600
    assert SCHEMA.is_valid(json.loads(given.model_dump_json()))


def test_max_wait_minutes_and_a_deadline_exclude_each_other() -> None:
    # Given a manifest with a deadline and max_wait_minutes
    document = {
        "name": "tiny",
        "training": {"command": ["python", "t.py"], "expected_hours": 2},
        "capacity": {"deadline": "36h", "max_wait_minutes": 30},
    }
    # When it is validated, Then both the model and the schema refuse it, saying why
    with pytest.raises(ValidationError, match="deadline and max_wait_minutes exclude each other"):
        JobManifest.model_validate(document)
    assert not SCHEMA.is_valid(document)
    # And without max_wait_minutes it is accepted
    del document["capacity"]["max_wait_minutes"]
    assert SCHEMA.is_valid(document)
    JobManifest.model_validate(document)


# ------------------------------------------------------------------------------------------- view and CLI


def waiting_job():
    store, compute = InMemoryJobStore(), PricedOut(zones=SUBNETS)
    job_in(store)
    with pytest.raises(CapacityUnavailable):
        acquire(store, compute)
    return store


def test_the_view_shows_the_wait_with_its_reasons_and_the_listing_since_when() -> None:
    # Given a job waiting for capacity
    store = waiting_job()
    job = store.get("tiny-1")
    # When it is shown and listed
    record = job_record(job)
    [summary] = list_jobs(store, status=None, name=None, limit=10, next_token=None, now=T0).jobs
    # Then the view has the wait and its reasons in one line, the listing since when it waits
    assert record["capacity_wait"]["since"] == "2026-11-30T17:02:00Z"
    assert record["capacity_wait"]["reasons_text"].startswith("SpotMaxPriceTooLow in g5.xlarge/us-east-1a")
    assert summary.waiting_for_capacity_since == T0
    # And an ended job is not listed as waiting, though its record keeps the wait
    update_job(store, "tiny-1", lambda j: transition(j, JobStatus.FAILED, T0 + timedelta(minutes=60)))
    [ended] = list_jobs(store, status=None, name=None, limit=10, next_token=None, now=T0).jobs
    assert ended.waiting_for_capacity_since is None


def test_status_says_since_when_and_why_and_how_long_an_ended_job_waited() -> None:
    # Given a job waiting since 17:02
    job = waiting_job().get("tiny-1")
    # When its status is shown 12 minutes later
    text = capacity_wait_text(job, T0 + timedelta(minutes=12, seconds=30))
    # Then it says since when, how long and why
    assert text is not None
    assert text.plain.startswith(
        "waiting for capacity since 17:02 UTC (12 min): SpotMaxPriceTooLow in g5.xlarge/us-east-1a; "
    )
    # And once the job ended of it, how long it waited, up to its end
    failed = transition(job, JobStatus.FAILED, T0 + timedelta(minutes=60))
    failed = failed.model_copy(update={"error": JobError(type="Capacity.MaxWaitExceeded", message="m")})
    ended = capacity_wait_text(failed, T0 + timedelta(days=1))
    assert ended is not None
    assert ended.plain.startswith("waited for capacity from 17:02 UTC (60 min): ")
    # And a job that does not wait says nothing of it
    assert capacity_wait_text(failed.model_copy(update={"capacity_wait": None}), T0) is None


def test_the_status_column_says_waiting_only_while_the_job_lives() -> None:
    # When a waiting job's status is shown, Then it says so; an ended job's says how it ended
    assert status_text(JobStatus.ACQUIRING, waiting=True).plain == "ACQUIRING (waiting)"
    assert status_text(JobStatus.ACQUIRING).plain == "ACQUIRING"
    assert status_text(JobStatus.FAILED, "Capacity.MaxWaitExceeded", waiting=True).plain == (
        "FAILED (Capacity.MaxWaitExceeded)"
    )


def test_a_deadlines_wait_says_the_policys_decision_and_is_not_ended_by_the_default_patience() -> None:
    # Given a job with a far deadline, whose spot pools are all full
    text = manifest_text("{deadline: 36h}").replace("t.py]}", "t.py], expected_hours: 2}")
    store, compute = InMemoryJobStore(), FakeCompute(zones=SUBNETS)
    store.create(
        new_job("tiny-1", "tiny", ManifestSource(bucket="b", key="k"), parse_manifest_text(text), T0)
    )
    compute.unavailable = True
    timing = workflow_timing(parse_manifest_text(text), 1.0)
    # When it asks now and two hours later (past the hour a job without a deadline waits)
    for now in (T0, T0 + timedelta(hours=2)):
        with pytest.raises(CapacityUnavailable):
            acquire_instance(
                job_id="tiny-1",
                store=store,
                compute=compute,
                subnet_ids=tuple(SUBNETS),
                launch_template_name="spotrun-agent",
                timing=timing,
                now=now,
            )
    # Then it still waits, since the first, with spot's answers and the policy's decision as the reason
    wait = store.get("tiny-1").capacity_wait
    assert wait.since == T0
    assert {e.code for e in wait.pools} == {"InsufficientInstanceCapacity"}
    assert wait.note is not None
    assert wait.note.startswith("deadline: wait")
    assert wait.reasons().endswith(wait.note)


def test_a_record_from_before_the_wait_record_keeps_waiting_since_its_time() -> None:
    # Given a stored record of a job waiting since T0, written when only waiting_for_capacity_since existed
    store = InMemoryJobStore()
    job_in(store)
    stored = store.get("tiny-1").model_dump(mode="json", exclude={"capacity_wait"})
    # When it is read back
    job = type(store.get("tiny-1")).model_validate({**stored, "waiting_for_capacity_since": T0.isoformat()})
    # Then its wait goes on from T0, with no pool's answer yet
    assert job.capacity_wait == CapacityWait(since=T0)

"""Each `capacity` field and `tags` reaches the CreateFleet request that launch_instance sends.

The pure functions (build_fleet_request, avoid_list, choose_lifecycle) have their own tests; these prove that
the manifest's values are the ones passed to them, so that ignoring a field in the wiring turns a test red.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotrun.control.capacity.acquire import acquire_instance
from spotrun.control.capacity.launch import launch_instance
from spotrun.control.capacity.standby import launch_standby
from spotrun.model.errors import CapacityUnavailable
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import Job, JobStatus, ManifestSource, new_job, transition
from spotrun.model.manifest.parse import parse_manifest_document
from spotrun.model.timing import workflow_timing
from tests.unit.fakes import FakeCompute, InMemoryJobStore

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
ZONES = {"subnet-a": "us-east-1a", "subnet-b": "us-east-1b"}
_TO_TRAINING = (JobStatus.ACQUIRING, JobStatus.BOOTING, JobStatus.STAGING, JobStatus.TRAINING)


def _job(capacity: dict[str, Any] | None = None, tags: dict[str, str] | None = None, attempts=()) -> Job:
    document: dict[str, Any] = {
        "name": "tiny",
        "resources": {"gpu_names": ["t4"]},
        "training": {"command": ["python", "train.py"]},
    }
    if capacity is not None:
        document["capacity"] = capacity
    if tags is not None:
        document["tags"] = tags
    manifest = parse_manifest_document(document).model_dump(mode="json")
    job = new_job("tiny-1", "tiny", ManifestSource(bucket="b", key="k", etag="e"), manifest, T0)
    return job.model_copy(update={"attempts": list(attempts)})


def _reclaimed(number: int, pool: tuple[str, str], minutes_ago: int) -> Attempt:
    return Attempt(
        number=number,
        instance_id=f"i-{number:017x}",
        instance_type=pool[0],
        availability_zone=pool[1],
        lifecycle="spot",
        price_per_hour=0.2,
        started_at=T0 - timedelta(minutes=minutes_ago + 5),
        ended_at=T0 - timedelta(minutes=minutes_ago),
        end_reason="interrupted",
    )


def _launch(
    job: Job, compute: FakeCompute | None = None, interruptions: int = 0
) -> tuple[Attempt, FakeCompute]:
    compute = compute or FakeCompute(ZONES)
    attempt = launch_instance(
        job,
        compute=compute,
        subnet_ids=tuple(ZONES),
        launch_template_name="spotrun-agent",
        interruptions=interruptions,
        now=T0,
    )
    return attempt, compute


def _pools(request: dict[str, Any]) -> set[tuple[str, str]]:
    overrides = request["LaunchTemplateConfigs"][0]["Overrides"]
    return {(item["InstanceType"], ZONES[item["SubnetId"]]) for item in overrides}


def _lifecycle(request: dict[str, Any]) -> str:
    return str(request["TargetCapacitySpecification"]["DefaultTargetCapacityType"])


def test_max_price_per_hour_caps_every_spot_override():
    # Given a manifest with a spot price ceiling
    job = _job({"max_price_per_hour": 0.35})

    # When the job's next instance is launched
    _, compute = _launch(job)

    # Then every pool of the spot request carries that ceiling
    (request,) = compute.fleet_requests
    overrides = request["LaunchTemplateConfigs"][0]["Overrides"]
    assert len(overrides) > 1
    assert {item.get("MaxPrice") for item in overrides} == {"0.35"}


def test_without_max_price_no_override_has_one():
    # Given no ceiling (pay the current spot price, as AWS recommends)
    # When the job's next instance is launched
    _, compute = _launch(_job())

    # Then no override names a price
    overrides = compute.fleet_requests[0]["LaunchTemplateConfigs"][0]["Overrides"]
    assert not [item for item in overrides if "MaxPrice" in item]


def test_tags_go_on_the_instances_and_volumes_with_spotruns_own():
    # Given a manifest with tags
    job = _job(tags={"project": "vision", "cost-center": "42"})

    # When the job's next instance is launched
    _, compute = _launch(job)

    # Then both the instances and their volumes get the user's tags and the job's id
    specifications = compute.fleet_requests[0]["TagSpecifications"]
    assert [spec["ResourceType"] for spec in specifications] == ["instance", "volume"]
    for spec in specifications:
        tags = {tag["Key"]: tag["Value"] for tag in spec["Tags"]}
        assert tags["project"] == "vision"
        assert tags["cost-center"] == "42"
        assert tags["spotrun:job-id"] == "tiny-1"


@pytest.mark.parametrize(
    ("avoid_pool_minutes", "minutes_ago", "avoided"),
    [(60, 45, True), (10, 20, False), (0, 1, False), (30, 29, True)],
)
def test_avoid_pool_minutes_decides_how_long_a_reclaimed_pool_is_left_out(
    avoid_pool_minutes, minutes_ago, avoided
):
    # Given a job whose last attempt was reclaimed in one pool some minutes ago
    pool = ("g4dn.xlarge", "us-east-1a")
    job = _job({"avoid_pool_minutes": avoid_pool_minutes}, attempts=[_reclaimed(1, pool, minutes_ago)])

    # When its next instance is launched
    _, compute = _launch(job)

    # Then that pool is left out exactly while the manifest's window lasts
    pools = _pools(compute.fleet_requests[0])
    assert (pool not in pools) is avoided
    assert ("g4dn.xlarge", "us-east-1b") in pools


@pytest.mark.parametrize(
    ("after", "interruptions", "lifecycle"), [(2, 1, "spot"), (2, 2, "on-demand"), (0, 0, "on-demand")]
)
def test_fallback_after_interruptions_moves_the_job_to_on_demand(after, interruptions, lifecycle):
    # Given a manifest that falls back to on-demand after some interruptions
    job = _job({"on_demand_fallback": True, "fallback_after_interruptions": after})

    # When the next instance is launched after that many interruptions
    attempt, compute = _launch(job, interruptions=interruptions)

    # Then the request, and the attempt, buy the lifecycle the policy gives
    assert _lifecycle(compute.fleet_requests[0]) == lifecycle
    assert attempt.lifecycle == lifecycle


class _NoSpot(FakeCompute):
    """EC2 with on-demand capacity only."""

    def create_fleet(self, request: dict[str, Any]) -> dict[str, Any]:
        self.unavailable = _lifecycle(request) == "spot"
        return super().create_fleet(request)


def test_on_demand_fallback_buys_on_demand_when_spot_has_no_capacity():
    # Given a manifest with the fallback, and no spot capacity anywhere
    job = _job({"on_demand_fallback": True})

    # When its next instance is launched
    attempt, compute = _launch(job, _NoSpot(ZONES))

    # Then spot was asked first, then on-demand, which the attempt runs on at the on-demand price
    assert [_lifecycle(request) for request in compute.fleet_requests] == ["spot", "on-demand"]
    assert attempt.lifecycle == "on-demand"


def test_without_on_demand_fallback_no_spot_capacity_is_an_error():
    # Given the default policy (spot only) and no spot capacity
    # When the next instance is launched
    # Then it fails as unavailable capacity, without asking for on-demand
    compute = _NoSpot(ZONES)
    with pytest.raises(CapacityUnavailable):
        _launch(_job(), compute)
    assert [_lifecycle(request) for request in compute.fleet_requests] == ["spot"]


def test_spot_false_launches_on_demand_from_the_start():
    # Given a manifest that does not use spot
    # When its first instance is launched
    attempt, compute = _launch(_job({"spot": False}))

    # Then only on-demand was asked for
    assert [_lifecycle(request) for request in compute.fleet_requests] == ["on-demand"]
    assert attempt.lifecycle == "on-demand"


def _in(job: Job, *statuses: JobStatus) -> Job:
    for status in statuses:
        job = transition(job, status, T0)
    return job


def test_the_next_attempt_after_the_nth_interruption_is_on_demand():
    # Given a job with the fallback after 1 interruption, whose first attempt was just reclaimed
    pool = ("g4dn.xlarge", "us-east-1a")
    job = _job(
        {"on_demand_fallback": True, "fallback_after_interruptions": 1}, attempts=[_reclaimed(1, pool, 1)]
    )
    store = InMemoryJobStore()
    store.create(_in(job, *_TO_TRAINING, JobStatus.INTERRUPTED))
    compute = FakeCompute(ZONES)

    # When the workflow acquires capacity for the next attempt
    attempt = acquire_instance(
        job_id="tiny-1",
        store=store,
        compute=compute,
        subnet_ids=tuple(ZONES),
        launch_template_name="spotrun-agent",
        timing=workflow_timing(job.require_manifest(), 1.0),
        now=T0,
    )

    # Then it is on-demand
    assert [_lifecycle(request) for request in compute.fleet_requests] == ["on-demand"]
    assert attempt.lifecycle == "on-demand"


def test_the_replacement_launched_on_the_nth_warning_is_on_demand():
    # Given a job with the fallback after 1 interruption, training on its first instance
    job = _job({"on_demand_fallback": True, "fallback_after_interruptions": 1})
    running = Attempt(
        number=1,
        instance_id="i-00000000000000001",
        instance_type="g4dn.xlarge",
        availability_zone="us-east-1a",
        lifecycle="spot",
        price_per_hour=0.2,
        started_at=T0,
    )
    store = InMemoryJobStore()
    store.create(_in(job.model_copy(update={"attempts": [running]}), *_TO_TRAINING))
    compute = FakeCompute(ZONES)

    # When that instance gets its interruption warning (the job's first) and a replacement is launched
    standby = launch_standby(
        job_id="tiny-1",
        store=store,
        compute=compute,
        subnet_ids=tuple(ZONES),
        launch_template_name="spotrun-agent",
        now=T0,
    )

    # Then the replacement already counts that interruption: it is on-demand
    assert standby is not None
    assert [_lifecycle(request) for request in compute.fleet_requests] == ["on-demand"]
    assert standby.lifecycle == "on-demand"

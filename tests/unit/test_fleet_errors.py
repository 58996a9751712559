"""CreateFleet errors: wait only on capacity; fail fast, with the code and what to do, on quota and configuration."""

from datetime import UTC, datetime, timedelta

import pytest

from spotrun.control.capacity.acquire import acquire_instance
from spotrun.control.capacity.standby import launch_standby
from spotrun.control.store import update_job
from spotrun.model.capacity.fleet_errors import call_error_response, classify, overall_kind, quota_name
from spotrun.model.capacity.fleet_request import parse_fleet_response
from spotrun.model.errors import (
    CapacityConfigurationError,
    CapacityMaxWaitExceeded,
    CapacityQuotaExceeded,
    CapacityUnavailable,
)
from spotrun.model.job.record import JobStatus, ManifestSource, new_job, transition
from spotrun.model.manifest.parse import parse_manifest_text
from spotrun.model.timing import workflow_timing
from tests.unit.fakes import FakeCompute, InMemoryJobStore

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SUBNETS = {"subnet-a": "us-east-1a", "subnet-b": "us-east-1b"}


def manifest(capacity: str = "{}"):
    return parse_manifest_text(
        f"name: tiny\nresources: {{gpu_names: [a10g]}}\ncapacity: {capacity}\n"
        "training: {command: [python, t.py]}\n"
    )


def job_in(store: InMemoryJobStore, capacity: str = "{}") -> None:
    source = ManifestSource(bucket="b", key="k", etag="e")
    store.create(new_job("tiny-1", "tiny", source, manifest(capacity).model_dump(mode="json"), T0))


def acquire(store, compute, now=T0, capacity="{}"):
    return acquire_instance(
        job_id="tiny-1",
        store=store,
        compute=compute,
        subnet_ids=tuple(SUBNETS),
        launch_template_name="spotrun-agent",
        timing=workflow_timing(manifest(capacity), 1.0),
        now=now,
    )


def pool_error(code: str, instance_type: str = "g5.xlarge", lifecycle: str = "spot") -> dict:
    return {
        "LaunchTemplateAndOverrides": {"Overrides": {"InstanceType": instance_type, "SubnetId": "subnet-a"}},
        "Lifecycle": lifecycle,
        "ErrorCode": code,
        "ErrorMessage": f"{code} message",
    }


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("InsufficientInstanceCapacity", "capacity"),
        ("InsufficientCapacity", "capacity"),
        ("SpotMaxPriceTooLow", "capacity"),
        ("MaxSpotInstanceCountExceeded", "quota"),
        ("VcpuLimitExceeded", "quota"),
        ("InstanceLimitExceeded", "quota"),
        ("InvalidLaunchTemplateName.NotFoundException", "configuration"),
        ("InvalidLaunchTemplateId.NotFound", "configuration"),
        ("Unsupported", "configuration"),
        ("InvalidParameterValue", "configuration"),
        ("UnauthorizedOperation", "configuration"),
        ("SomethingNew", "configuration"),
    ],
)
def test_each_code_has_its_kind(code: str, kind: str) -> None:
    # Given an EC2 error code
    # When it is classified
    # Then only a lack of capacity is worth waiting on; an unknown code fails fast rather than waits
    assert classify(code) == kind


def test_any_capacity_error_among_the_pools_means_wait() -> None:
    # Given pools that failed for capacity, for a quota and for configuration
    # When the launch as a whole is classified
    # Then the pool short of capacity may come back: wait; without one, the quota comes first
    assert overall_kind(["Unsupported", "InsufficientInstanceCapacity", "VcpuLimitExceeded"]) == "capacity"
    assert overall_kind(["Unsupported", "VcpuLimitExceeded"]) == "quota"
    assert overall_kind(["Unsupported", "InvalidParameterValue"]) == "configuration"


def test_a_spot_quota_error_names_the_quota_to_raise() -> None:
    # Given every pool refused for the account's Spot vCPU quota
    response = {"Instances": [], "Errors": [pool_error("MaxSpotInstanceCountExceeded", "g5.2xlarge")]}
    # When the response is read
    with pytest.raises(CapacityQuotaExceeded) as caught:
        parse_fleet_response(response, SUBNETS)
    # Then the error, under its ASL name, gives the code and the Service Quotas quota with the vCPUs needed
    message = str(caught.value)
    assert type(caught.value).__name__ == "Capacity.QuotaExceeded"
    assert "MaxSpotInstanceCountExceeded in g5.2xlarge/us-east-1a" in message
    assert "'All G and VT Spot Instance Requests' to at least 8 vCPUs" in message


@pytest.mark.parametrize(
    ("instance_type", "lifecycle", "quota"),
    [
        ("g6e.xlarge", "spot", "All G and VT Spot Instance Requests"),
        ("p4d.24xlarge", "spot", "All P4, P3 and P2 Spot Instance Requests"),
        ("p5.48xlarge", "spot", "All P5 Spot Instance Requests"),
        ("g5.xlarge", "on-demand", "Running On-Demand G and VT instances"),
        ("p5.48xlarge", "on-demand", "Running On-Demand P instances"),
    ],
)
def test_quota_names_follow_family_and_lifecycle(instance_type: str, lifecycle: str, quota: str) -> None:
    # Given an instance type and purchase option
    # When the quota that limits them is named
    # Then it is the Service Quotas name of that family group
    assert quota_name(instance_type, lifecycle) == quota


def test_a_missing_launch_template_says_what_to_do() -> None:
    # Given EC2 refused the whole call because the launch template does not exist
    response = call_error_response(
        "InvalidLaunchTemplateName.NotFoundException", "The specified launch template does not exist."
    )
    # When it is read like any CreateFleet response
    with pytest.raises(CapacityConfigurationError) as caught:
        parse_fleet_response(response, SUBNETS)
    # Then the code, EC2's message and the fix are in the error
    message = str(caught.value)
    assert type(caught.value).__name__ == "Capacity.ConfigurationError"
    assert "InvalidLaunchTemplateName.NotFoundException" in message
    assert "does not exist" in message
    assert "deploy the spotrun stack" in message


def test_a_denied_call_names_the_permissions() -> None:
    # Given the acquire function's role may not create fleets
    response = call_error_response(
        "UnauthorizedOperation", "You are not authorized to perform this operation."
    )
    # When the refusal is read
    with pytest.raises(CapacityConfigurationError, match=r"UnauthorizedOperation.*ec2:CreateFleet"):
        parse_fleet_response(response, SUBNETS)


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("VcpuLimitExceeded", CapacityQuotaExceeded),
        ("InvalidLaunchTemplateName.NotFoundException", CapacityConfigurationError),
        ("Unsupported", CapacityConfigurationError),
    ],
)
def test_acquire_fails_fast_on_a_refusal_and_does_not_start_waiting(code: str, error: type) -> None:
    # Given a job, and EC2 refusing every pool for a quota or a configuration problem
    store, compute = InMemoryJobStore(), FakeCompute(zones=SUBNETS)
    job_in(store)
    compute.unavailable, compute.error_code = True, code
    # When capacity is acquired
    with pytest.raises(error, match=code):
        acquire(store, compute)
    # Then the job is not marked as waiting for capacity (the workflow fails it at once, it does not retry)
    assert store.get("tiny-1").capacity_wait is None


def test_acquire_waits_on_capacity_and_gives_up_naming_the_last_answer() -> None:
    # Given a job and no capacity anywhere
    store, compute = InMemoryJobStore(), FakeCompute(zones=SUBNETS)
    job_in(store)
    compute.unavailable = True
    # When the workflow keeps asking past its patience
    with pytest.raises(CapacityUnavailable):
        acquire(store, compute)
    assert store.get("tiny-1").capacity_wait.since == T0
    # Then it gives up with the codes EC2 last gave
    with pytest.raises(CapacityMaxWaitExceeded, match="InsufficientInstanceCapacity"):
        acquire(store, compute, now=T0 + timedelta(hours=2))


def test_a_spot_quota_falls_back_to_on_demand_when_allowed() -> None:
    # Given a job allowed to fall back to on-demand, and a Spot quota of 0
    store, compute = InMemoryJobStore(), FakeCompute(zones=SUBNETS)
    job_in(store, capacity="{on_demand_fallback: true}")
    real_create = compute.create_fleet

    def spot_refused(request):
        if request["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "spot":
            return {"Instances": [], "Errors": [pool_error("MaxSpotInstanceCountExceeded")]}
        return real_create(request)

    compute.create_fleet = spot_refused
    # When capacity is acquired
    attempt = acquire(store, compute, capacity="{on_demand_fallback: true}")
    # Then the quota is what the fallback is for: the attempt runs on-demand
    assert attempt.lifecycle == "on-demand"


def test_a_standby_refused_by_ec2_is_simply_not_launched() -> None:
    # Given a training job, and EC2 now refusing launches for a quota
    store, compute = InMemoryJobStore(), FakeCompute(zones=SUBNETS)
    job_in(store)
    acquire(store, compute)
    for status in (JobStatus.STAGING, JobStatus.TRAINING):
        update_job(store, "tiny-1", lambda current, status=status: transition(current, status, T0))
    compute.unavailable, compute.error_code = True, "VcpuLimitExceeded"
    # When a warning asks for a standby
    standby = launch_standby(
        job_id="tiny-1",
        store=store,
        compute=compute,
        subnet_ids=tuple(SUBNETS),
        launch_template_name="spotrun-agent",
        now=T0,
    )
    # Then none is launched and nothing is raised (the workflow's own acquire reports the refusal)
    assert standby is None

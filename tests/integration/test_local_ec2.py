"""EC2 in the emulator: instant fleets choose pools, instances boot, terminations free capacity."""

from __future__ import annotations

import datetime
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fixtures_handlers as handlers  # noqa: E402

from spotrun.local.capacity.catalog import Pool  # noqa: E402
from spotrun.local.runtime import LocalRuntime  # noqa: E402

TIME_SCALE = 0.01
BOOT_SECONDS = 40.0  # 0.4 s real

POOLS = [
    Pool("g5.xlarge", "us-east-1a", spot_price=0.40, capacity=1, boot_delay_seconds=BOOT_SECONDS),
    Pool("g5.xlarge", "us-east-1b", spot_price=0.30, capacity=1, boot_delay_seconds=BOOT_SECONDS),
    Pool("g6.xlarge", "us-east-1a", spot_price=0.35, capacity=1, boot_delay_seconds=BOOT_SECONDS),
    Pool("p5.48xlarge", "us-east-1c", spot_price=30.0, capacity=1, boot_delay_seconds=BOOT_SECONDS),
]


@pytest.fixture(scope="module")
def module_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    workdir = tmp_path_factory.mktemp("ec2")
    with handlers.pass_runtime(workdir, POOLS, TIME_SCALE) as started:
        yield started


@pytest.fixture
def runtime(module_runtime: LocalRuntime) -> Iterator[LocalRuntime]:
    """The module's runtime, with every instance a test launched terminated and every pool refilled after."""
    yield module_runtime
    live = [sim.instance_id for sim in module_runtime.instances if not sim.terminating]
    if live:
        module_runtime.client("ec2").terminate_instances(InstanceIds=live)
    for pool in POOLS:
        module_runtime.capacity.refill(pool.instance_type, pool.availability_zone)


def _subnets(runtime: LocalRuntime, *zones: str) -> list[str]:
    subnets = runtime.client("ec2").describe_subnets(SubnetIds=list(runtime.settings.subnet_ids))["Subnets"]
    by_zone = {s["AvailabilityZone"]: s["SubnetId"] for s in subnets}
    return [by_zone[zone] for zone in zones]


def _fleet(
    runtime: LocalRuntime, overrides: list[dict[str, Any]], capacity_type: str = "spot"
) -> dict[str, Any]:
    return runtime.client("ec2").create_fleet(  # type: ignore[no-any-return]
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": 1, "DefaultTargetCapacityType": capacity_type},
        SpotOptions={"AllocationStrategy": "price-capacity-optimized"},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateName": runtime.settings.launch_template_name,
                    "Version": "$Latest",
                },
                "Overrides": overrides,
            }
        ],
    )


def _g5_and_g6(runtime: LocalRuntime, **extra: Any) -> list[dict[str, Any]]:
    a, b = _subnets(runtime, "us-east-1a", "us-east-1b")
    return [
        {"InstanceType": "g5.xlarge", "SubnetId": a, **extra},
        {"InstanceType": "g5.xlarge", "SubnetId": b, **extra},
        {"InstanceType": "g6.xlarge", "SubnetId": a, **extra},
    ]


def _describe(runtime: LocalRuntime, instance_id: str) -> dict[str, Any]:
    reservations = runtime.client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"]
    return reservations[0]["Instances"][0]  # type: ignore[no-any-return]


def test_fleet_launches_the_cheapest_pool_with_capacity(runtime: LocalRuntime) -> None:
    # Given g5 in 1b at 0.30, g6 in 1a at 0.35, g5 in 1a at 0.40, listed most expensive first
    overrides = _g5_and_g6(runtime)

    # When an instant spot fleet asks for one instance
    reply = _fleet(runtime, overrides)

    # Then exactly the cheapest (type, subnet) is launched, as spot, in its zone
    assert reply.get("Errors", []) == []
    [launched] = reply["Instances"]
    assert (launched["InstanceType"], launched["Lifecycle"]) == ("g5.xlarge", "spot")
    instance = _describe(runtime, launched["InstanceIds"][0])
    assert instance["Placement"]["AvailabilityZone"] == "us-east-1b"
    assert instance["InstanceLifecycle"] == "spot"
    assert runtime.capacity.free("g5.xlarge", "us-east-1b") == 0


def test_fleet_moves_on_when_the_cheapest_pool_is_exhausted_and_fails_when_all_are(
    runtime: LocalRuntime,
) -> None:
    # Given the cheapest pool exhausted
    runtime.capacity.exhaust("g5.xlarge", "us-east-1b")

    # When fleets ask for one instance, then another, then a third
    second_best = _fleet(runtime, _g5_and_g6(runtime))
    third_best = _fleet(runtime, _g5_and_g6(runtime))
    none_left = _fleet(runtime, _g5_and_g6(runtime))

    # Then they get g6 in 1a, then g5 in 1a, then no instance and AWS's capacity errors
    assert [i["InstanceType"] for i in second_best["Instances"]] == ["g6.xlarge"]
    assert [i["InstanceType"] for i in third_best["Instances"]] == ["g5.xlarge"]
    assert none_left["Instances"] == []
    assert {e["ErrorCode"] for e in none_left["Errors"]} == {"InsufficientInstanceCapacity"}
    assert len(none_left["Errors"]) == 3
    error = none_left["Errors"][0]
    assert error["Lifecycle"] == "spot"
    assert error["LaunchTemplateAndOverrides"]["Overrides"]["InstanceType"] in {"g5.xlarge", "g6.xlarge"}


def test_fleet_respects_max_price(runtime: LocalRuntime) -> None:
    # Given a max price below every g5/g6 pool
    overrides = _g5_and_g6(runtime, MaxPrice="0.25")

    # When a fleet is asked for
    reply = _fleet(runtime, overrides)

    # Then nothing launches and the errors say the price was too low
    assert reply["Instances"] == []
    assert {e["ErrorCode"] for e in reply["Errors"]} == {"SpotMaxPriceTooLow"}


def test_terminating_an_instance_frees_its_pool(runtime: LocalRuntime) -> None:
    # Given the single slot of the p5 pool taken
    [subnet] = _subnets(runtime, "us-east-1c")
    first = _fleet(runtime, [{"InstanceType": "p5.48xlarge", "SubnetId": subnet}])
    instance_id = first["Instances"][0]["InstanceIds"][0]
    assert _fleet(runtime, [{"InstanceType": "p5.48xlarge", "SubnetId": subnet}])["Instances"] == []

    # When the instance is terminated
    runtime.client("ec2").terminate_instances(InstanceIds=[instance_id])

    # Then the pool serves a new fleet
    again = _fleet(runtime, [{"InstanceType": "p5.48xlarge", "SubnetId": subnet}])
    assert [i["InstanceType"] for i in again["Instances"]] == ["p5.48xlarge"]


def test_an_instance_is_pending_for_its_boot_delay_then_running(runtime: LocalRuntime) -> None:
    # Given a freshly launched instance
    started = time.monotonic()
    instance_id = _fleet(runtime, _g5_and_g6(runtime))["Instances"][0]["InstanceIds"][0]
    ec2 = runtime.client("ec2")

    # When it is described at once, and again once the runtime says it booted
    early = _describe(runtime, instance_id)["State"]["Name"]
    early_status = ec2.describe_instance_status(InstanceIds=[instance_id])["InstanceStatuses"]
    assert runtime.wait_running(instance_id, timeout=5)
    waited = time.monotonic() - started

    # Then it was pending (not listed as running) and is running after about the scaled boot delay
    assert early == "pending"
    assert early_status == []
    assert _describe(runtime, instance_id)["State"]["Name"] == "running"
    assert waited >= BOOT_SECONDS * TIME_SCALE * 0.9
    assert instance_id in runtime.running_instance_ids()


def test_instance_requirements_choose_among_matching_types(runtime: LocalRuntime) -> None:
    # Given an attribute-based override for one NVIDIA L4 or A10G GPU, in zones 1a and 1b
    requirements = {
        "VCpuCount": {"Min": 4},
        "MemoryMiB": {"Min": 16_000},
        "AcceleratorCount": {"Min": 1, "Max": 1},
        "AcceleratorManufacturers": ["nvidia"],
        "AcceleratorNames": ["a10g", "l4"],
    }
    overrides = [
        {"InstanceRequirements": requirements, "SubnetId": s}
        for s in _subnets(runtime, "us-east-1a", "us-east-1b")
    ]

    # When a fleet is asked for
    reply = _fleet(runtime, overrides)

    # Then the cheapest matching pool serves it
    [launched] = reply["Instances"]
    assert launched["InstanceType"] == "g5.xlarge"
    assert _describe(runtime, launched["InstanceIds"][0])["Placement"]["AvailabilityZone"] == "us-east-1b"


def test_on_demand_fleets_use_on_demand_capacity(runtime: LocalRuntime) -> None:
    # Given every spot pool exhausted
    for pool in POOLS:
        runtime.capacity.exhaust(pool.instance_type, pool.availability_zone)

    # When an on-demand fleet is asked for
    reply = _fleet(runtime, _g5_and_g6(runtime), capacity_type="on-demand")

    # Then it launches on-demand, on the type with the lowest on-demand price
    [launched] = reply["Instances"]
    assert (launched["Lifecycle"], launched["InstanceType"]) == ("on-demand", "g6.xlarge")
    assert "InstanceLifecycle" not in _describe(runtime, launched["InstanceIds"][0])


def test_spot_price_history_reports_the_pools_prices(runtime: LocalRuntime) -> None:
    # Given a price change in one pool
    runtime.capacity.set_price("g6.xlarge", "us-east-1a", 0.31)
    ec2 = runtime.client("ec2")

    # When the history of g5 and g6 is read
    history = ec2.describe_spot_price_history(
        InstanceTypes=["g5.xlarge", "g6.xlarge"], ProductDescriptions=["Linux/UNIX"]
    )["SpotPriceHistory"]
    zone_b = ec2.describe_spot_price_history(
        Filters=[{"Name": "availability-zone", "Values": ["us-east-1b"]}]
    )

    # Then the latest record of each pool holds its current price
    latest: dict[tuple[str, str], float] = {}
    for record in history:  # newest first
        latest.setdefault((record["InstanceType"], record["AvailabilityZone"]), float(record["SpotPrice"]))
    assert latest == {
        ("g5.xlarge", "us-east-1a"): 0.40,
        ("g5.xlarge", "us-east-1b"): 0.30,
        ("g6.xlarge", "us-east-1a"): 0.31,
    }
    assert {r["AvailabilityZone"] for r in zone_b["SpotPriceHistory"]} == {"us-east-1b"}
    # From a start time on: the price in effect then, and the change since, newest first
    since = ec2.describe_spot_price_history(
        InstanceTypes=["g6.xlarge"],
        StartTime=datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5),
    )["SpotPriceHistory"]
    assert [float(r["SpotPrice"]) for r in since] == [0.31, 0.35]
    assert since[0]["Timestamp"] > since[1]["Timestamp"]


def test_state_changes_are_published_on_the_default_bus(runtime: LocalRuntime) -> None:
    # Given a rule sending EC2 state changes to a queue
    sqs, events = runtime.client("sqs"), runtime.client("events")
    queue_url = sqs.create_queue(QueueName="state-changes")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    pattern = {"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"]}
    events.put_rule(Name="test-state-changes", EventPattern=json.dumps(pattern))
    events.put_targets(Rule="test-state-changes", Targets=[{"Id": "queue", "Arn": queue_arn}])

    # When an instance is launched, boots and is terminated
    instance_id = _fleet(runtime, _g5_and_g6(runtime))["Instances"][0]["InstanceIds"][0]
    assert runtime.wait_running(instance_id, timeout=5)
    runtime.client("ec2").terminate_instances(InstanceIds=[instance_id])
    assert runtime.instance(instance_id).gone.wait(5)

    # Then the queue got pending, running, shutting-down and terminated for it, each once, in no set order:
    # EventBridge makes no ordering promise for a rule's deliveries (DESIGN.md: at least once, out of order), and
    # the emulator publishes each state change from the instance's own thread
    states: list[str] = []
    deadline = time.monotonic() + 5
    while len(states) < 4 and time.monotonic() < deadline:
        for message in sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", []):
            body = json.loads(message["Body"])
            if body["detail"]["instance-id"] == instance_id:
                states.append(body["detail"]["state"])
    assert sorted(states) == sorted(["pending", "running", "shutting-down", "terminated"])
    assert _describe(runtime, instance_id)["State"]["Name"] == "terminated"


def test_ssm_reaches_an_instance_only_once_its_agent_has_registered(runtime: LocalRuntime) -> None:
    # Given an instance that has just become running
    [launched] = _fleet(runtime, _g5_and_g6(runtime))["Instances"]
    instance_id = launched["InstanceIds"][0]
    assert runtime.wait_running(instance_id, timeout=5)
    ssm = runtime.client("ssm")

    def listed() -> list[dict[str, Any]]:
        answer = ssm.describe_instance_information(Filters=[{"Key": "InstanceIds", "Values": [instance_id]}])
        return answer["InstanceInformationList"]  # type: ignore[no-any-return]

    # When SSM is asked about it before its agent registered
    early = listed()
    with pytest.raises(ssm.exceptions.InvalidInstanceId):
        ssm.send_command(DocumentName="AWS-RunShellScript", InstanceIds=[instance_id], Parameters={})
    # Then it is not a managed node yet, and commands are refused as on AWS
    assert early == []
    # When the registration delay has passed
    deadline = time.monotonic() + 5
    while not listed() and time.monotonic() < deadline:
        time.sleep(0.05)
    # Then it is listed Online, and leaves the list once terminated
    [node] = listed()
    assert node["PingStatus"] == "Online"
    runtime.client("ec2").terminate_instances(InstanceIds=[instance_id])
    assert listed() == []


def test_a_new_instance_may_be_unknown_to_describe_and_terminate_for_a_while(runtime: LocalRuntime) -> None:
    # Given EC2's eventual consistency injected for the next launch
    runtime.consistency.inject(describe=1, terminate=1, window_seconds=50.0)  # 0.5 s real
    [launched] = _fleet(runtime, _g5_and_g6(runtime))["Instances"]
    instance_id = launched["InstanceIds"][0]
    ec2 = runtime.client("ec2")
    # When it is described and terminated at once
    with pytest.raises(ec2.exceptions.ClientError, match=r"InvalidInstanceID\.NotFound"):
        ec2.describe_instances(InstanceIds=[instance_id])
    with pytest.raises(ec2.exceptions.ClientError, match=r"InvalidInstanceID\.NotFound"):
        ec2.terminate_instances(InstanceIds=[instance_id])
    # Then the terminate did nothing; after the window both calls know it
    assert not runtime.instance(instance_id).terminating
    time.sleep(0.6)
    assert _describe(runtime, instance_id)["InstanceId"] == instance_id
    ec2.terminate_instances(InstanceIds=[instance_id])
    assert runtime.instance(instance_id).terminating

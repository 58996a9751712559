"""Unit tests of spotrun.capacity: candidate types, the CreateFleet request and response, fallback policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.validate import ParamValidator
from moto import mock_aws

from spotrun.capacity import (
    MAX_OVERRIDES,
    FleetLaunchError,
    LaunchedInstance,
    Pool,
    avoid_list,
    build_fleet_request,
    candidate_types,
    choose_lifecycle,
    fleet_errors,
    parse_fleet_response,
)
from spotrun.errors import CapacityUnavailable, ManifestInvalid
from spotrun.manifest import CapacityPolicy, Resources
from spotrun.pricing import GPU_CATALOG, InstanceTypeInfo, instance_info

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
SUBNETS = {"subnet-aaa": "us-east-1a", "subnet-bbb": "us-east-1b"}


def names(types: list[InstanceTypeInfo]) -> list[str]:
    return [info.name for info in types]


def request_for(**overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "candidates": [instance_info("g6.xlarge"), instance_info("g5.xlarge")],
        "subnets": SUBNETS,
        "launch_template_name": "spotrun-gpu",
        "lifecycle": "spot",
        "max_price_per_hour": None,
        "avoid_pools": (),
        "nodes": 1,
        "tags": {"spotrun:job": "job-1"},
    }
    arguments.update(overrides)
    return build_fleet_request(**arguments)


def override_pools(request: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (override["InstanceType"], override["SubnetId"])
        for override in request["LaunchTemplateConfigs"][0]["Overrides"]
    ]


def assert_valid_create_fleet(request: dict[str, Any]) -> None:
    # botocore's own model of the EC2 API: the same check boto3 makes before sending.
    shape = botocore.session.get_session().get_service_model("ec2").operation_model("CreateFleet").input_shape
    report = ParamValidator().validate(request, shape)
    assert not report.has_errors(), report.generate_report()


# ----------------------------------------------------------------------------------------------------
# candidate_types
# ----------------------------------------------------------------------------------------------------


def test_default_resources_get_every_single_gpu_type_cheapest_first() -> None:
    # Given resources with every default (one GPU, any model)
    resources = Resources()
    # When the candidates are chosen
    candidates = candidate_types(resources)
    # Then every one-GPU type qualifies, no multi-GPU box, in on-demand price order starting with g4dn.xlarge
    expected = {name for name, info in GPU_CATALOG.items() if info.gpus == 1}
    assert set(names(candidates)) == expected
    prices = [info.on_demand_usd_per_hour for info in candidates]
    assert prices == sorted(prices)
    assert candidates[0].name == "g4dn.xlarge"


def test_gpu_names_restrict_the_model() -> None:
    # Given a job that wants one A10G
    resources = Resources(gpu_names=["a10g"])
    # When the candidates are chosen
    candidates = candidate_types(resources)
    # Then only single-GPU g5 sizes come back, cheapest first
    assert names(candidates) == ["g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g5.8xlarge", "g5.16xlarge"]


def test_gpu_count_is_matched_exactly() -> None:
    # Given a job that wants four L4 or A10G GPUs on each node
    resources = Resources(gpu_names=["l4", "a10g"], gpus_per_node=4)
    # When the candidates are chosen
    candidates = candidate_types(resources)
    # Then only the four-GPU sizes qualify, not the eight-GPU ones
    assert names(candidates) == ["g6.12xlarge", "g5.12xlarge", "g6.24xlarge", "g5.24xlarge"]


def test_gpu_memory_is_a_minimum_per_gpu() -> None:
    # Given a job that needs eight GPUs of at least 80 GiB each
    resources = Resources(gpus_per_node=8, gpu_memory_gib=80)
    # When the candidates are chosen
    candidates = candidate_types(resources)
    # Then A100 80 GiB, H100 and H200 qualify, and the 40 GiB A100 does not
    assert names(candidates) == ["p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge"]


def test_no_matching_count_says_which_counts_exist() -> None:
    # Given a job asking two GPUs per node, a count no catalog type has
    resources = Resources(gpus_per_node=2, gpu_names=["a10g"])
    # When the candidates are chosen
    with pytest.raises(ManifestInvalid) as caught:
        candidate_types(resources)
    # Then the error names the requirement and the counts that do exist, under the ASL error name
    message = str(caught.value)
    assert "exactly 2 GPU(s) per node" in message
    assert "['a10g']" in message
    assert "carry 1, 4 or 8 of them" in message
    assert type(caught.value).__name__ == "Manifest.Invalid"


def test_no_gpu_with_enough_memory_says_the_largest() -> None:
    # Given a job asking 24 GiB on a T4 (which has 16)
    resources = Resources(gpu_names=["t4"], gpu_memory_gib=24)
    # When the candidates are chosen
    with pytest.raises(ManifestInvalid) as caught:
        candidate_types(resources)
    # Then the error says the memory is what excluded every type
    message = str(caught.value)
    assert "at least 24 GiB per GPU" in message
    assert "the largest of those GPUs has 16 GiB" in message


def test_explicit_types_are_used_as_given_sorted_by_price() -> None:
    # Given an explicit list, out of price order and with a duplicate
    resources = Resources(instance_types=["g5.xlarge", "g4dn.xlarge", "g6.xlarge", "g5.xlarge"])
    # When the candidates are chosen
    candidates = candidate_types(resources)
    # Then the same types come back once each, cheapest first
    assert names(candidates) == ["g4dn.xlarge", "g6.xlarge", "g5.xlarge"]


def test_unknown_explicit_types_are_named() -> None:
    # Given an explicit list with two types spotrun does not know
    resources = Resources(instance_types=["g5.xlarge", "g7e.2xlarge", "x9.huge"])
    # When the candidates are chosen
    with pytest.raises(ManifestInvalid) as caught:
        candidate_types(resources)
    # Then both unknown names are in the message, and the known one is not blamed
    message = str(caught.value)
    assert "g7e.2xlarge, x9.huge not in spotrun's GPU catalog" in message
    assert "g5.xlarge" not in message.split("(known")[0]


def test_explicit_type_with_the_wrong_gpu_count_is_reported() -> None:
    # Given an explicit 4-GPU type while the job asks one GPU per node (the default)
    resources = Resources(instance_types=["g5.xlarge", "g5.12xlarge"])
    # When the candidates are chosen
    # Then the contradiction is reported rather than the type silently dropped
    with pytest.raises(ManifestInvalid, match=r"g5\.12xlarge has 4 GPU\(s\), resources.gpus_per_node is 1"):
        candidate_types(resources)


def test_explicit_type_with_too_little_gpu_memory_is_reported() -> None:
    # Given an explicit T4 type while the job needs 24 GiB per GPU
    resources = Resources(instance_types=["g4dn.xlarge", "g5.xlarge"], gpu_memory_gib=24)
    # When the candidates are chosen
    # Then the type and both numbers are named
    with pytest.raises(ManifestInvalid, match=r"g4dn\.xlarge has 16 GiB per GPU, .*at least 24"):
        candidate_types(resources)


# ----------------------------------------------------------------------------------------------------
# build_fleet_request
# ----------------------------------------------------------------------------------------------------


def test_spot_request_for_one_node() -> None:
    # Given two candidates, two zones, spot, no price cap
    # When the request is built
    request = request_for()
    # Then it is exactly an instant spot fleet over the four pools, cheapest type first
    tags = [{"Key": "spotrun:job", "Value": "job-1"}]
    assert request == {
        "Type": "instant",
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {"LaunchTemplateName": "spotrun-gpu", "Version": "$Latest"},
                "Overrides": [
                    {"InstanceType": "g6.xlarge", "SubnetId": "subnet-aaa"},
                    {"InstanceType": "g6.xlarge", "SubnetId": "subnet-bbb"},
                    {"InstanceType": "g5.xlarge", "SubnetId": "subnet-aaa"},
                    {"InstanceType": "g5.xlarge", "SubnetId": "subnet-bbb"},
                ],
            }
        ],
        "TargetCapacitySpecification": {
            "TotalTargetCapacity": 1,
            "DefaultTargetCapacityType": "spot",
            "SpotTargetCapacity": 1,
        },
        "SpotOptions": {"AllocationStrategy": "price-capacity-optimized"},
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
    }
    assert_valid_create_fleet(request)


def test_spot_max_price_is_a_string_on_every_override() -> None:
    # Given a spot price cap
    # When the request is built
    request = request_for(max_price_per_hour=0.5)
    # Then each override carries it as the string EC2 expects
    overrides = request["LaunchTemplateConfigs"][0]["Overrides"]
    assert {override["MaxPrice"] for override in overrides} == {"0.5"}
    assert_valid_create_fleet(request)


def test_max_price_keeps_its_precision_without_exponent() -> None:
    # Given a cap with four decimals and a tiny one just above EC2's minimum
    # When requests are built
    precise = request_for(max_price_per_hour=1.2345)
    tiny = request_for(max_price_per_hour=0.0015)
    # Then the strings are plain decimals
    assert precise["LaunchTemplateConfigs"][0]["Overrides"][0]["MaxPrice"] == "1.2345"
    assert tiny["LaunchTemplateConfigs"][0]["Overrides"][0]["MaxPrice"] == "0.0015"


def test_max_price_at_ec2_minimum_is_refused() -> None:
    # Given a cap of 0.001 USD, which EC2 rejects
    # When the request is built
    # Then the manifest field is blamed
    with pytest.raises(ManifestInvalid, match=r"capacity\.max_price_per_hour"):
        request_for(max_price_per_hour=0.001)


def test_on_demand_request_uses_on_demand_options_and_no_max_price() -> None:
    # Given an on-demand request, with a spot cap left in the policy
    # When the request is built
    request = request_for(lifecycle="on-demand", max_price_per_hour=0.5)
    # Then it targets on-demand capacity, lowest price first, and no override carries a spot price
    assert request["TargetCapacitySpecification"] == {
        "TotalTargetCapacity": 1,
        "DefaultTargetCapacityType": "on-demand",
        "OnDemandTargetCapacity": 1,
    }
    assert request["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
    assert "SpotOptions" not in request
    assert all("MaxPrice" not in override for override in request["LaunchTemplateConfigs"][0]["Overrides"])
    assert_valid_create_fleet(request)


@pytest.mark.parametrize(
    ("lifecycle", "options_key"), [("spot", "SpotOptions"), ("on-demand", "OnDemandOptions")]
)
def test_several_nodes_are_all_or_nothing_in_one_zone_on_one_type(lifecycle: str, options_key: str) -> None:
    # Given a four-node job
    # When the request is built
    request = request_for(lifecycle=lifecycle, nodes=4)
    # Then all four land together or none does
    options = request[options_key]
    assert options["SingleAvailabilityZone"] is True
    assert options["SingleInstanceType"] is True
    assert options["MinTargetCapacity"] == 4
    assert request["TargetCapacitySpecification"]["TotalTargetCapacity"] == 4
    assert_valid_create_fleet(request)


def test_one_node_sets_no_minimum_capacity() -> None:
    # Given a one-node job
    # When the request is built
    request = request_for(nodes=1)
    # Then no MinTargetCapacity is sent (EC2 would want a Single* flag with it, and one instance needs none)
    assert set(request["SpotOptions"]) == {"AllocationStrategy"}


def test_avoided_pools_are_left_out() -> None:
    # Given g6.xlarge in us-east-1a was just reclaimed (as a Pool) and g5.xlarge in us-east-1b (as a tuple)
    avoid = {Pool("g6.xlarge", "us-east-1a"), ("g5.xlarge", "us-east-1b")}
    # When the request is built
    request = request_for(avoid_pools=avoid)
    # Then only the two other pools remain
    assert override_pools(request) == [("g6.xlarge", "subnet-bbb"), ("g5.xlarge", "subnet-aaa")]


def test_when_every_pool_is_avoided_none_is() -> None:
    # Given every pool of the request was reclaimed recently
    avoid = {(t, z) for t in ("g6.xlarge", "g5.xlarge") for z in ("us-east-1a", "us-east-1b")}
    # When the request is built
    request = request_for(avoid_pools=avoid)
    # Then the avoid list is dropped rather than sending a request with no pool
    assert len(override_pools(request)) == 4


def test_one_subnet_per_zone_is_used() -> None:
    # Given two subnets in us-east-1a and one in us-east-1b (a fleet request may not span two of one zone)
    subnets = {"subnet-zzz": "us-east-1a", "subnet-aaa": "us-east-1a", "subnet-bbb": "us-east-1b"}
    # When the request is built for one type
    request = request_for(candidates=[instance_info("g5.xlarge")], subnets=subnets)
    # Then the lowest subnet id of us-east-1a and the one of us-east-1b are used
    assert override_pools(request) == [("g5.xlarge", "subnet-aaa"), ("g5.xlarge", "subnet-bbb")]


def test_overrides_are_capped_keeping_the_cheapest() -> None:
    # Given the whole catalog over eight zones: more pools than EC2 accepts in one request
    candidates = sorted(GPU_CATALOG.values(), key=lambda info: info.on_demand_usd_per_hour)
    subnets = {f"subnet-{index}": f"us-east-1{letter}" for index, letter in enumerate("abcdefgh")}
    assert len(candidates) * len(subnets) > MAX_OVERRIDES
    # When the request is built
    request = request_for(candidates=candidates, subnets=subnets)
    # Then exactly the cap is sent, and the dropped pools are those of the most expensive types
    pools = override_pools(request)
    assert len(pools) == MAX_OVERRIDES == 300
    assert pools[0][0] == "g4dn.xlarge"
    assert "p5e.48xlarge" not in {instance_type for instance_type, _ in pools}
    assert_valid_create_fleet(request)


def test_no_tags_means_no_tag_specifications() -> None:
    # Given no tags
    # When the request is built
    request = request_for(tags={})
    # Then the key is absent
    assert "TagSpecifications" not in request


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"candidates": []}, "no candidate"),
        ({"subnets": {}}, "no subnets"),
        ({"nodes": 0}, "at least 1"),
        ({"lifecycle": "capacity-block"}, "lifecycle"),
    ],
)
def test_impossible_requests_are_refused(overrides: dict[str, Any], match: str) -> None:
    # Given arguments no fleet can be built from
    # When the request is built
    # Then a ValueError says what is wrong
    with pytest.raises(ValueError, match=match):
        request_for(**overrides)


# ----------------------------------------------------------------------------------------------------
# parse_fleet_response and fleet_errors
# ----------------------------------------------------------------------------------------------------


def aws_instance(
    instance_type: str,
    subnet_id: str,
    ids: list[str],
    *,
    zone: str | None = None,
    lifecycle: str | None = "spot",
) -> dict[str, Any]:
    """One entry of CreateFleet's Instances, shaped as in botocore's service model."""
    overrides: dict[str, Any] = {"InstanceType": instance_type, "SubnetId": subnet_id}
    entry: dict[str, Any] = {
        "LaunchTemplateAndOverrides": {
            "LaunchTemplateSpecification": {"LaunchTemplateName": "spotrun-gpu", "Version": "3"},
            "Overrides": overrides,
        },
        "InstanceIds": ids,
        "InstanceType": instance_type,
    }
    if lifecycle:
        entry["Lifecycle"] = lifecycle
    if zone:
        entry["AvailabilityZone"] = zone
        entry["SubnetId"] = subnet_id
    return entry


def aws_error(
    code: str, instance_type: str | None, subnet_id: str | None, message: str = ""
) -> dict[str, Any]:
    entry: dict[str, Any] = {"ErrorCode": code, "ErrorMessage": message, "Lifecycle": "spot"}
    if instance_type:
        entry["LaunchTemplateAndOverrides"] = {
            "LaunchTemplateSpecification": {"LaunchTemplateName": "spotrun-gpu", "Version": "3"},
            "Overrides": {"InstanceType": instance_type, "SubnetId": subnet_id},
        }
    return entry


def test_launched_instance_is_read_with_its_zone() -> None:
    # Given a response where AWS names the zone and subnet of the instance
    response = {
        "FleetId": "fleet-1",
        "Instances": [aws_instance("g5.xlarge", "subnet-bbb", ["i-1"], zone="us-east-1b")],
        "Errors": [],
    }
    # When it is parsed
    launched = parse_fleet_response(response, SUBNETS)
    # Then the instance, its pool and its lifecycle come back
    assert launched == [LaunchedInstance("i-1", "g5.xlarge", "us-east-1b", "spot", "subnet-bbb")]
    assert launched[0].pool == ("g5.xlarge", "us-east-1b")


def test_zone_is_found_through_the_subnet_when_aws_omits_it() -> None:
    # Given a response that names only the subnet (as moto does)
    response = {"Instances": [aws_instance("g6.xlarge", "subnet-aaa", ["i-1"])]}
    # When it is parsed
    launched = parse_fleet_response(response, SUBNETS)
    # Then the zone comes from the subnets mapping
    assert launched[0].availability_zone == "us-east-1a"
    assert launched[0].subnet_id == "subnet-aaa"


def test_every_instance_id_of_an_entry_is_returned() -> None:
    # Given a multi-node launch reported as one entry with three ids
    response = {
        "Instances": [
            aws_instance("p4d.24xlarge", "subnet-aaa", ["i-1", "i-2", "i-3"], lifecycle="on-demand")
        ]
    }
    # When it is parsed
    launched = parse_fleet_response(response, SUBNETS)
    # Then there is one LaunchedInstance per id
    assert [instance.instance_id for instance in launched] == ["i-1", "i-2", "i-3"]
    assert {instance.lifecycle for instance in launched} == {"on-demand"}


def test_errors_of_other_pools_do_not_hide_a_launch() -> None:
    # Given one pool failed and another launched
    response = {
        "Instances": [aws_instance("g5.xlarge", "subnet-bbb", ["i-1"])],
        "Errors": [aws_error("InsufficientInstanceCapacity", "g6.xlarge", "subnet-aaa")],
    }
    # When it is parsed
    launched = parse_fleet_response(response, SUBNETS)
    # Then the launched instance is returned
    assert [instance.instance_id for instance in launched] == ["i-1"]


def test_missing_lifecycle_falls_back_to_the_requested_one() -> None:
    # Given an entry without Lifecycle
    response = {"Instances": [aws_instance("g5.xlarge", "subnet-aaa", ["i-1"], lifecycle=None)]}
    # When it is parsed, saying on-demand was requested
    launched = parse_fleet_response(response, SUBNETS, requested_lifecycle="on-demand")
    # Then the instance is recorded as on-demand
    assert launched[0].lifecycle == "on-demand"


def test_missing_lifecycle_without_a_fallback_is_an_error() -> None:
    # Given an entry without Lifecycle and no requested lifecycle
    response = {"Instances": [aws_instance("g5.xlarge", "subnet-aaa", ["i-1"], lifecycle=None)]}
    # When it is parsed
    # Then the instance id is named rather than a lifecycle guessed (it decides the cost)
    with pytest.raises(ValueError, match="i-1"):
        parse_fleet_response(response, SUBNETS)


def test_an_unknown_subnet_is_an_error_naming_the_instance() -> None:
    # Given an instance in a subnet missing from the mapping, with no zone in the response
    response = {"Instances": [aws_instance("g5.xlarge", "subnet-other", ["i-9"])]}
    # When it is parsed
    # Then the error names the instance and the subnet
    with pytest.raises(ValueError, match=r"i-9.*subnet-other"):
        parse_fleet_response(response, SUBNETS)


def test_no_instance_raises_capacity_unavailable_with_codes_and_pools() -> None:
    # Given every pool failed
    response = {
        "FleetId": "fleet-1",
        "Instances": [],
        "Errors": [
            aws_error(
                "InsufficientInstanceCapacity",
                "g5.xlarge",
                "subnet-aaa",
                "There is no Spot capacity available that matches your request.",
            ),
            aws_error("InsufficientInstanceCapacity", "g5.xlarge", "subnet-bbb"),
            aws_error("SpotMaxPriceTooLow", "g6.xlarge", "subnet-aaa"),
        ],
    }
    # When it is parsed
    with pytest.raises(CapacityUnavailable) as caught:
        parse_fleet_response(response, SUBNETS)
    # Then the message groups pools by code and keeps AWS's explanation, under the ASL error name
    message = str(caught.value)
    assert "InsufficientInstanceCapacity in g5.xlarge/us-east-1a, g5.xlarge/us-east-1b" in message
    assert "There is no Spot capacity available" in message
    assert "SpotMaxPriceTooLow in g6.xlarge/us-east-1a" in message
    assert type(caught.value).__name__ == "Capacity.Unavailable"


def test_an_empty_response_is_capacity_unavailable() -> None:
    # Given a response with neither instances nor errors
    # When it is parsed
    # Then it still fails loudly
    with pytest.raises(CapacityUnavailable, match="no instance and no error"):
        parse_fleet_response({"FleetId": "fleet-1"}, SUBNETS)


def test_fleet_errors_are_classified() -> None:
    # Given a capacity error with a pool and a configuration error without one
    response = {
        "Errors": [
            aws_error("InsufficientInstanceCapacity", "g5.xlarge", "subnet-bbb", "no capacity"),
            aws_error("InvalidLaunchTemplateName.NotFoundException", None, None, "not found"),
        ]
    }
    # When the errors are read
    errors = fleet_errors(response, SUBNETS)
    # Then each has its pool (when known) and whether waiting could help
    assert errors == [
        FleetLaunchError(
            "InsufficientInstanceCapacity", "no capacity", Pool("g5.xlarge", "us-east-1b"), "spot"
        ),
        FleetLaunchError("InvalidLaunchTemplateName.NotFoundException", "not found", None, "spot"),
    ]
    assert [error.is_capacity for error in errors] == [True, False]


def test_request_and_response_round_trip_through_moto() -> None:
    # Given an emulated account with two subnets and a launch template
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnets = {
            ec2.create_subnet(VpcId=vpc_id, CidrBlock=f"10.0.{index}.0/24", AvailabilityZone=zone)["Subnet"][
                "SubnetId"
            ]: zone
            for index, zone in enumerate(("us-east-1a", "us-east-1b"))
        }
        ec2.create_launch_template(
            LaunchTemplateName="spotrun-gpu", LaunchTemplateData={"ImageId": "ami-12c6146b"}
        )
        request = request_for(subnets=subnets, nodes=2, tags={"spotrun:job": "job-1"})
        # When the fleet is created and its response parsed
        launched = parse_fleet_response(ec2.create_fleet(**request), subnets)
        # Then two spot instances of one candidate type exist, tagged, in the subnet's zone
        assert len(launched) == 2
        assert {instance.lifecycle for instance in launched} == {"spot"}
        assert {instance.instance_type for instance in launched} <= {"g6.xlarge", "g5.xlarge"}
        described = ec2.describe_instances(InstanceIds=[instance.instance_id for instance in launched])
        for reservation in described["Reservations"]:
            for instance in reservation["Instances"]:
                assert {"Key": "spotrun:job", "Value": "job-1"} in instance["Tags"]
                ours = next(item for item in launched if item.instance_id == instance["InstanceId"])
                assert instance["Placement"]["AvailabilityZone"] == ours.availability_zone


# ----------------------------------------------------------------------------------------------------
# avoid_list
# ----------------------------------------------------------------------------------------------------


def test_recently_reclaimed_pools_are_avoided() -> None:
    # Given reclaims 5, 29 and 31 minutes ago with a 30-minute window
    reclaimed = [
        (("g5.xlarge", "us-east-1a"), NOW - timedelta(minutes=5)),
        (Pool("g6.xlarge", "us-east-1b"), NOW - timedelta(minutes=29)),
        (("g4dn.xlarge", "us-east-1c"), NOW - timedelta(minutes=31)),
    ]
    # When the avoid list is computed
    avoided = avoid_list(reclaimed, NOW, 30)
    # Then the two recent pools are avoided, the old one is allowed again
    assert avoided == {Pool("g5.xlarge", "us-east-1a"), Pool("g6.xlarge", "us-east-1b")}


def test_a_reclaim_exactly_at_the_window_edge_has_expired() -> None:
    # Given a reclaim exactly 30 minutes ago
    reclaimed = [(("g5.xlarge", "us-east-1a"), NOW - timedelta(minutes=30))]
    # When the avoid list is computed with a 30-minute window
    # Then the pool is no longer avoided ("less than minutes ago")
    assert avoid_list(reclaimed, NOW, 30) == set()


def test_zero_minutes_avoids_nothing() -> None:
    # Given a reclaim one second ago and avoidance turned off
    reclaimed = [(("g5.xlarge", "us-east-1a"), NOW - timedelta(seconds=1))]
    # When the avoid list is computed
    # Then nothing is avoided
    assert avoid_list(reclaimed, NOW, 0) == set()


def test_repeated_and_future_stamped_reclaims() -> None:
    # Given one pool reclaimed twice (one long ago) and one stamped a few seconds in the future (clock skew)
    reclaimed = [
        (("g5.xlarge", "us-east-1a"), NOW - timedelta(hours=5)),
        (("g5.xlarge", "us-east-1a"), NOW - timedelta(minutes=1)),
        (("g6.xlarge", "us-east-1b"), NOW + timedelta(seconds=3)),
    ]
    # When the avoid list is computed
    avoided = avoid_list(reclaimed, NOW, 30)
    # Then the latest reclaim counts and the future-stamped one is recent
    assert avoided == {Pool("g5.xlarge", "us-east-1a"), Pool("g6.xlarge", "us-east-1b")}


def test_pool_reads_as_type_slash_zone_and_equals_a_tuple() -> None:
    # Given a pool
    pool = Pool("g5.xlarge", "us-east-1a")
    # When it is printed and compared
    # Then it reads well in messages and is interchangeable with a plain tuple
    assert str(pool) == "g5.xlarge/us-east-1a"
    assert pool == ("g5.xlarge", "us-east-1a")
    assert ("g5.xlarge", "us-east-1a") in {pool}


# ----------------------------------------------------------------------------------------------------
# choose_lifecycle
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "interruptions", "spot_unavailable", "expected"),
    [
        (CapacityPolicy(spot=False), 0, False, "on-demand"),
        (CapacityPolicy(spot=False), 0, True, "on-demand"),
        (CapacityPolicy(), 0, False, "spot"),
        (CapacityPolicy(), 50, True, "spot"),  # no fallback: keep trying spot, however bad it gets
        (CapacityPolicy(on_demand_fallback=True), 0, False, "spot"),
        (CapacityPolicy(on_demand_fallback=True), 2, False, "spot"),
        (CapacityPolicy(on_demand_fallback=True), 3, False, "on-demand"),  # default threshold is 3
        (CapacityPolicy(on_demand_fallback=True), 4, False, "on-demand"),
        (CapacityPolicy(on_demand_fallback=True), 0, True, "on-demand"),
        (CapacityPolicy(on_demand_fallback=True, fallback_after_interruptions=1), 1, False, "on-demand"),
        (CapacityPolicy(on_demand_fallback=True, fallback_after_interruptions=0), 0, False, "on-demand"),
    ],
)
def test_choose_lifecycle(
    policy: CapacityPolicy, interruptions: int, spot_unavailable: bool, expected: str
) -> None:
    # Given a capacity policy and the job's history so far
    # When the next attempt's lifecycle is chosen
    lifecycle = choose_lifecycle(policy, interruptions, spot_unavailable)
    # Then it follows the policy
    assert lifecycle == expected

"""Unit tests of spotrun.model.capacity.fleet_request: the CreateFleet request (its response:
test_fleet_response.py)."""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest
from botocore.validate import ParamValidator

from spotrun.model.capacity.candidates import Pool
from spotrun.model.capacity.fleet_request import MAX_OVERRIDES, build_fleet_request
from spotrun.model.capacity.pricing import GPU_CATALOG, instance_info
from spotrun.model.errors import ManifestInvalid

SUBNETS = {"subnet-aaa": "us-east-1a", "subnet-bbb": "us-east-1b"}


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


def test_placement_groups_put_every_override_in_its_subnets_group() -> None:
    # Given a two-node job and the deployment's cluster placement group of each subnet
    groups = {"subnet-aaa": "spotrun-cluster-a", "subnet-bbb": "spotrun-cluster-b"}
    # When the request is built with them
    request = request_for(nodes=2, placement_groups=groups)
    # Then each override launches into the group of its own subnet, and the group stays all-or-nothing
    overrides = request["LaunchTemplateConfigs"][0]["Overrides"]
    assert [(o["SubnetId"], o["Placement"]) for o in overrides] == [
        ("subnet-aaa", {"GroupName": "spotrun-cluster-a"}),
        ("subnet-bbb", {"GroupName": "spotrun-cluster-b"}),
        ("subnet-aaa", {"GroupName": "spotrun-cluster-a"}),
        ("subnet-bbb", {"GroupName": "spotrun-cluster-b"}),
    ]
    assert request["SpotOptions"]["SingleAvailabilityZone"] is True
    assert request["SpotOptions"]["MinTargetCapacity"] == 2
    assert_valid_create_fleet(request)


def test_placement_groups_follow_the_pools_left_after_avoiding() -> None:
    # Given g6.xlarge in us-east-1a was just reclaimed
    groups = {"subnet-aaa": "pg-a", "subnet-bbb": "pg-b"}
    # When the request is built with placement groups
    request = request_for(nodes=2, placement_groups=groups, avoid_pools={("g6.xlarge", "us-east-1a")})
    # Then the remaining overrides still carry their own subnet's group
    overrides = request["LaunchTemplateConfigs"][0]["Overrides"]
    assert [(o["InstanceType"], o["Placement"]["GroupName"]) for o in overrides] == [
        ("g6.xlarge", "pg-b"),
        ("g5.xlarge", "pg-a"),
        ("g5.xlarge", "pg-b"),
    ]


def test_no_placement_groups_means_no_placement() -> None:
    # Given no placement groups (one node, or a deployment without them)
    # When the request is built
    request = request_for(nodes=2)
    # Then no override names a placement
    assert all("Placement" not in o for o in request["LaunchTemplateConfigs"][0]["Overrides"])


def test_a_subnet_without_its_placement_group_is_refused() -> None:
    # Given placement groups that miss one of the request's subnets
    # When the request is built
    # Then it is refused, naming the subnet, rather than launching part of the pools outside any group
    with pytest.raises(ValueError, match="subnet-bbb"):
        request_for(nodes=2, placement_groups={"subnet-aaa": "pg-a"})


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

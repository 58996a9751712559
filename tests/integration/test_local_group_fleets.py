"""The emulator's group fleets (every node in one pool or none) and cluster placement groups."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import multinode_world as world  # noqa: E402
from multinode_world import fresh_runtime, started_runtime  # noqa: E402, F401 - the `runtime` fixture

from spotrun.local.runtime import LocalRuntime  # noqa: E402

# ------------------------------------------------------------------------------------------- group fleets


def test_a_group_fleet_puts_every_node_in_one_pool_even_when_a_cheaper_pool_holds_some(
    runtime: LocalRuntime,
) -> None:
    # Given g5 in 1a cheapest but with room for one node, g5 in 1b with room for two

    # When two nodes are asked for, all in one zone and of one type, two at least
    reply = world.group_fleet(runtime, 2, world.overrides(runtime))

    # Then both launch in g5 1b (not one in 1a and one in 1b), and the pool counts both
    ids = world.ids(reply)
    assert len(ids) == 2
    described = world.describe(runtime, ids)
    assert {(i["InstanceType"], i["Placement"]["AvailabilityZone"]) for i in described.values()} == {
        ("g5.xlarge", "us-east-1b")
    }
    assert runtime.capacity.used("g5.xlarge", "us-east-1b") == 2
    assert runtime.capacity.free("g5.xlarge", "us-east-1b") == 0
    assert runtime.capacity.used("g5.xlarge", "us-east-1a") == 0


def test_a_group_fleet_launches_nothing_when_no_pool_holds_every_node(runtime: LocalRuntime) -> None:
    # Given no pool with room for four nodes (3 at most), though the pools hold six together

    # When four nodes are asked for, all or nothing
    reply = world.group_fleet(runtime, 4, world.overrides(runtime))

    # Then nothing launches, and each pool says why in the instant fleet's Errors, as EC2 does
    assert reply["Instances"] == []
    assert {e["ErrorCode"] for e in reply["Errors"]} == {"InsufficientInstanceCapacity"}
    assert {
        (e["LaunchTemplateAndOverrides"]["Overrides"]["InstanceType"], e["Lifecycle"])
        for e in reply["Errors"]
    } == {("g5.xlarge", "spot"), ("g6.xlarge", "spot")}
    assert len(reply["Errors"]) == 3
    assert all(runtime.capacity.used(p.instance_type, p.availability_zone) == 0 for p in world.POOLS)
    assert runtime.running_instance_ids() == []


def test_without_a_minimum_a_single_zone_fleet_launches_what_one_pool_can(runtime: LocalRuntime) -> None:
    # Given no minimum target capacity

    # When four nodes are asked for in one zone and of one type
    reply = world.group_fleet(runtime, 4, world.overrides(runtime), MinTargetCapacity=None)

    # Then the pool that can launch most (g6 1a, three) does, and the rest is reported short
    ids = world.ids(reply)
    assert len(ids) == 3
    assert {i["InstanceType"] for i in world.describe(runtime, ids).values()} == {"g6.xlarge"}
    assert reply["Errors"]


def test_a_group_fleet_without_an_allocation_strategy_takes_ec2s_default(runtime: LocalRuntime) -> None:
    # When two nodes are asked for with no allocation strategy (EC2's default: lowest-price)
    reply = world.group_fleet(runtime, 2, world.overrides(runtime), AllocationStrategy=None)

    # Then both launch in the cheapest pool that holds both
    ids = world.ids(reply)
    assert len(ids) == 2
    assert {i["Placement"]["AvailabilityZone"] for i in world.describe(runtime, ids).values()} == {
        "us-east-1b"
    }


def test_a_minimum_without_single_zone_or_type_is_refused(runtime: LocalRuntime) -> None:
    # When a minimum is asked for without saying one zone or one type
    with pytest.raises(ClientError) as refused:
        world.group_fleet(
            runtime, 2, world.overrides(runtime), SingleAvailabilityZone=None, SingleInstanceType=None
        )

    # Then EC2 refuses the call as a whole, and nothing launched
    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "SingleAvailabilityZone" in refused.value.response["Error"]["Message"]
    assert runtime.running_instance_ids() == []
    assert not any(not s.terminating for s in runtime.instances)


# --------------------------------------------------------------------------------------- placement groups


def test_nodes_launch_into_the_placement_group_their_overrides_name(runtime: LocalRuntime) -> None:
    # Given a cluster placement group
    ec2 = runtime.client("ec2")
    created = ec2.create_placement_group(GroupName="job-nodes", Strategy="cluster")["PlacementGroup"]
    assert (created["GroupName"], created["Strategy"], created["State"]) == (
        "job-nodes",
        "cluster",
        "available",
    )

    # When two nodes are launched with overrides naming it
    ids = world.ids(
        world.group_fleet(runtime, 2, world.overrides(runtime, Placement={"GroupName": "job-nodes"}))
    )

    # Then both are in it, it is listed, and it cannot be deleted while they run
    assert len(ids) == 2
    assert {i["Placement"]["GroupName"] for i in world.describe(runtime, ids).values()} == {"job-nodes"}
    [listed] = ec2.describe_placement_groups(GroupNames=["job-nodes"])["PlacementGroups"]
    assert listed["GroupId"] == created["GroupId"]
    with pytest.raises(ClientError, match=r"InvalidPlacementGroup\.InUse"):
        ec2.delete_placement_group(GroupName="job-nodes")
    with pytest.raises(ClientError, match=r"InvalidPlacementGroup\.Duplicate"):
        ec2.create_placement_group(GroupName="job-nodes", Strategy="cluster")

    # And once they are terminated it can be, after which it is unknown
    ec2.terminate_instances(InstanceIds=ids)
    ec2.delete_placement_group(GroupName="job-nodes")
    with pytest.raises(ClientError, match=r"InvalidPlacementGroup\.Unknown"):
        ec2.describe_placement_groups(GroupNames=["job-nodes"])


def test_a_placement_group_that_does_not_exist_launches_nothing(runtime: LocalRuntime) -> None:
    # When nodes are asked for in a placement group nobody created
    reply = world.group_fleet(runtime, 2, world.overrides(runtime, Placement={"GroupName": "no-such-group"}))

    # Then nothing launches and every override is refused for the unknown group
    assert reply["Instances"] == []
    assert {e["ErrorCode"] for e in reply["Errors"]} == {"InvalidPlacementGroup.Unknown"}
    assert "no-such-group" in reply["Errors"][0]["ErrorMessage"]
    assert all(runtime.capacity.used(p.instance_type, p.availability_zone) == 0 for p in world.POOLS)


def test_an_instance_outside_any_placement_group_says_none(runtime: LocalRuntime) -> None:
    # When a node is launched with no placement group
    [iid] = world.ids(world.group_fleet(runtime, 1, world.overrides(runtime)))
    # Then its placement names none, as EC2's does
    assert world.describe(runtime, [iid])[iid]["Placement"].get("GroupName", "") == ""

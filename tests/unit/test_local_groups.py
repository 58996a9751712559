"""Fleets that launch as a group (one zone, one type, a minimum) and each instance's own loopback address."""

from __future__ import annotations

import pytest

from spotrun.local.capacity.catalog import Pool
from spotrun.local.capacity.groups import GroupOptionsError, GroupRule, plan_group
from spotrun.local.capacity.pools import INSUFFICIENT_CAPACITY, Candidate, CapacityModel, FleetPlan
from spotrun.local.instances.addresses import LoopbackAddresses


def _model() -> CapacityModel:
    # us-east-1a: g5 (cheapest, 1 free) and g6 (2 free); us-east-1b: g5 (2 free, dearer than 1a's g5)
    return CapacityModel(
        [
            Pool("g5.xlarge", "us-east-1a", spot_price=0.30, capacity=1, boot_delay_seconds=60),
            Pool("g6.xlarge", "us-east-1a", spot_price=0.45, capacity=2, boot_delay_seconds=60),
            Pool("g5.xlarge", "us-east-1b", spot_price=0.40, capacity=2, boot_delay_seconds=60),
        ]
    )


def _candidates() -> list[Candidate]:
    keys = [("g5.xlarge", "us-east-1a"), ("g6.xlarge", "us-east-1a"), ("g5.xlarge", "us-east-1b")]
    return [Candidate(i, t, z) for i, (t, z) in enumerate(keys)]


def _placed(plan: FleetPlan) -> list[tuple[str, str, int]]:
    return [(c.instance_type, c.availability_zone, n) for c, n in plan.allocations]


def test_one_zone_may_mix_types_when_only_the_zone_is_single() -> None:
    # Given room for three in us-east-1a across two types, and two in us-east-1b
    rule = GroupRule(single_zone=True, min_target=3)

    # When three are planned in a single zone
    plan = plan_group(_model(), _candidates(), "spot", 3, None, rule)

    # Then us-east-1a serves all three, cheapest type first
    assert _placed(plan) == [("g5.xlarge", "us-east-1a", 1), ("g6.xlarge", "us-east-1a", 2)]


def test_one_pool_serves_every_node_when_zone_and_type_are_single() -> None:
    # Given the cheapest pool with room for one only
    rule = GroupRule(single_zone=True, single_type=True, min_target=2)

    # When two are planned
    plan = plan_group(_model(), _candidates(), "spot", 2, "price-capacity-optimized", rule)

    # Then the cheapest pool that holds both takes them
    assert _placed(plan) == [("g5.xlarge", "us-east-1b", 2)]
    assert plan.shortfalls == []


def test_a_candidate_without_a_pool_is_short_and_the_others_still_serve() -> None:
    # Given a candidate type the emulator offers no pool of, listed first
    candidates = [Candidate(9, "g4dn.2xlarge", "us-east-1a"), *_candidates()]
    rule = GroupRule(single_zone=True, single_type=True, min_target=2)

    # When two are planned, and then four (more than any pool holds)
    plan = plan_group(_model(), candidates, "spot", 2, None, rule)
    none = plan_group(_model(), candidates, "spot", 4, None, GroupRule(single_zone=True, min_target=4))

    # Then the cheapest pool that holds both serves the two; for four, nothing launches and the poolless one is
    # short too
    assert _placed(plan) == [("g5.xlarge", "us-east-1b", 2)]
    assert none.allocations == []
    assert 9 in {s.candidate.order for s in none.shortfalls}


def test_below_the_minimum_nothing_is_planned_and_every_pool_says_why() -> None:
    # Given no pool with room for three of one type
    rule = GroupRule(single_zone=True, single_type=True, min_target=3)

    # When three are planned
    plan = plan_group(_model(), _candidates(), "spot", 3, None, rule)

    # Then nothing launches, and each candidate is short of capacity
    assert plan.allocations == []
    assert sorted(s.candidate.order for s in plan.shortfalls) == [0, 1, 2]
    assert {s.code for s in plan.shortfalls} == {INSUFFICIENT_CAPACITY}


def test_a_minimum_also_holds_across_pools_when_nothing_is_single() -> None:
    # Given a minimum that the pools together cannot reach (five free in all); a rule checked by EC2's own
    # options would require one of the singles, the planner must still never launch under the minimum
    rule = GroupRule(min_target=6)

    # When six are planned
    plan = plan_group(_model(), _candidates(), "spot", 6, None, rule)

    # Then nothing launches
    assert plan.allocations == []
    assert plan.shortfalls


@pytest.mark.parametrize(
    ("options", "count", "fragment"),
    [
        ({"MinTargetCapacity": 2}, 2, "SingleAvailabilityZone or SingleInstanceType"),
        ({"MinTargetCapacity": 3, "SingleInstanceType": True}, 2, "cannot exceed"),
    ],
)
def test_options_ec2_refuses(options: dict[str, object], count: int, fragment: str) -> None:
    # When options EC2 refuses are read, then they are refused with InvalidParameterValue
    with pytest.raises(GroupOptionsError) as refused:
        GroupRule.from_options(options, count, "spot")
    assert refused.value.code == "InvalidParameterValue"
    assert fragment in refused.value.message


def test_options_as_the_query_protocol_sends_them_are_read() -> None:
    # When the options arrive as text
    rule = GroupRule.from_options(
        {"SingleAvailabilityZone": "true", "SingleInstanceType": "false", "MinTargetCapacity": "2"}, 2, "spot"
    )
    # Then they mean what they say
    assert rule == GroupRule(single_zone=True, single_type=False, min_target=2)


def test_live_instances_never_share_an_address_and_a_freed_one_is_not_handed_out_at_once() -> None:
    # Given three instances with addresses
    addresses = LoopbackAddresses()
    a, b, c = (addresses.take(iid) for iid in ("i-a", "i-b", "i-c"))

    # When the first leaves and a fourth arrives
    addresses.release("i-a")
    d = addresses.take("i-d")

    # Then every address is a loopback one other than 127.0.0.1, the live ones distinct, the freed one not reused
    assert (a, b, c) == ("127.0.0.2", "127.0.0.3", "127.0.0.4")
    assert d == "127.0.0.5"
    assert addresses.of("i-a") is None
    assert addresses.take("i-b") == b  # an instance keeps its address


def test_addresses_skip_network_and_broadcast_looking_ones_and_wrap_around() -> None:
    # Given the next address at the end of a /24
    addresses = LoopbackAddresses()
    addresses._next = int.from_bytes(bytes([127, 0, 0, 254]), "big")

    # When two are taken
    first, second = addresses.take("i-1"), addresses.take("i-2")

    # Then .255 and .0 are skipped
    assert (first, second) == ("127.0.0.254", "127.0.1.1")

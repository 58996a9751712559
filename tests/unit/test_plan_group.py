"""The plan of a multi-node job: every pool is where the whole group lands, priced per node and per group-hour,
the EFA decision is the launch template's, and ``spotrun plan`` shows both."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from spotrun.cli.plan import plan_view
from spotrun.control.views.plan_model import JobPlan
from spotrun.model.capacity.candidates import candidate_types
from spotrun.model.capacity.group_launch import group_launch_template
from spotrun.model.capacity.pricing import on_demand_price
from spotrun.model.manifest.parse import parse_manifest_document
from tests.unit.test_plan import SPOT, ZONES, document, offered_pools, plan_of, spot_fleet_request

TORCHRUN = ["torchrun", "--nproc-per-node", "1", "train.py"]


def group_document(nodes: int = 3, **changes: Any) -> dict[str, Any]:
    doc = document(**changes)
    doc["resources"] = {**doc["resources"], "nodes": nodes}
    doc["training"] = {**doc["training"], "command": TORCHRUN}
    return doc


def test_each_pool_is_priced_per_node_and_per_group_hour():
    # Given a three-node job over two types in two zones, with the on-demand fallback
    plan = plan_of(group_document(capacity={"on_demand_fallback": True}))
    # Then every pool's group price is three nodes of it, spot and on-demand alike
    assert plan.group is not None
    assert plan.group.nodes == 3
    for pool in plan.pools:
        region = pool.availability_zone[:-1]
        spot = SPOT[(pool.instance_type, pool.availability_zone)]
        assert pool.spot_price_per_hour == spot
        assert pool.group_spot_price_per_hour == (None if spot is None else round(3 * spot, 6))
        assert pool.group_on_demand_price_per_hour == round(
            3 * on_demand_price(pool.instance_type, region), 6
        )
    # And the first pool is the cheapest for the group as for one node
    assert plan.pools[0].group_spot_price_per_hour == round(3 * 0.22, 6)


def test_a_groups_pools_are_the_pools_of_its_all_or_nothing_fleet_request():
    # Given the fleet request acquisition sends for the whole group
    request = spot_fleet_request(
        group_document(nodes=2), nodes=2, placement_groups={subnet: f"pg-{subnet}" for subnet in ZONES}
    )
    # Then it lands both nodes in one of its overrides' pools, and those are the plan's pools
    assert request["SpotOptions"]["SingleInstanceType"]
    assert request["SpotOptions"]["SingleAvailabilityZone"]
    assert request["SpotOptions"]["MinTargetCapacity"] == 2
    plan = plan_of(group_document(nodes=2))
    assert {(p.instance_type, p.availability_zone) for p in plan.pools} == offered_pools(request)


def efa_document(types: list[str], efa: bool) -> dict[str, Any]:
    doc = group_document(nodes=2)
    doc["resources"] = {"instance_types": types, "nodes": 2, "efa": efa}
    return doc


def template_has_efa(doc: dict[str, Any]) -> bool:
    resources = parse_manifest_document(doc).resources
    _name, efa = group_launch_template(
        candidate_types(resources),
        nodes=resources.nodes,
        efa_wanted=resources.efa,
        launch_template_name="plain",
        efa_launch_template_name="efa",
    )
    return efa


def test_the_nodes_get_an_efa_exactly_when_acquisition_would_launch_them_with_one():
    # Given types that all carry an EFA, one type without, and EFA switched off
    cases = [
        (["g5.8xlarge", "g4dn.8xlarge"], True, True, []),
        (["g5.8xlarge", "g5.xlarge"], True, False, ["g5.xlarge"]),
        (["g5.8xlarge", "g4dn.8xlarge"], False, False, []),
    ]
    for types, wanted, expected, without in cases:
        doc = efa_document(types, wanted)
        # When each is planned
        plan = plan_of(doc)
        # Then the plan says what the launch template would give, and which types lack an EFA
        assert plan.group is not None
        assert plan.group.efa is expected
        assert template_has_efa(doc) is expected
        assert plan.group.types_without_efa == without
        assert plan.group.efa_requested is wanted
        assert plan.ok


def test_the_group_says_how_a_lost_node_and_a_hang_are_handled():
    # Given a group with its own replacement bound and the default hang bound
    plan = plan_of(group_document(nodes=2, capacity={"replace_node_minutes": 7}))
    # Then both are in the plan (30 min is a group's default hang bound)
    assert plan.group is not None
    assert (plan.group.replace_node_minutes, plan.group.hang_minutes) == (7, 30)


def test_a_single_node_plan_has_no_group():
    assert plan_of(document()).group is None


def rendered(plan: JobPlan) -> str:
    console = Console(width=200, record=True)
    console.print(plan_view(plan.model_dump(mode="json")))
    return console.export_text()


def test_spotrun_plan_shows_group_prices_and_the_network():
    # Given a two-node plan whose one type has no EFA
    text = rendered(plan_of(efa_document(["g5.xlarge"], True)))
    # Then the table prices each pool per node and per group, and the lines say where and how the group runs
    assert "spot x2" in text
    assert "on-demand x2" in text
    assert "$0.5000" in text  # two g5.xlarge nodes at 0.25 in us-east-1a
    assert "group: 2 nodes in one pool (one type, one zone" in text
    assert "network: no EFA (g5.xlarge has none" in text
    assert "the group moves after 10 min" in text


def test_spotrun_plan_says_why_a_group_has_no_efa():
    # Given the same EFA types, once with resources.efa and once without
    with_efa = rendered(plan_of(efa_document(["g5.8xlarge"], True)))
    without = rendered(plan_of(efa_document(["g5.8xlarge"], False)))
    # Then the first has its EFA, the second says the manifest turned it off
    assert "network: every node gets an EFA" in with_efa
    assert "network: no EFA (resources.efa: false)" in without


def test_spotrun_plan_of_one_node_keeps_its_two_price_columns():
    text = rendered(plan_of(document()))
    assert "spot $/h" in text
    assert " x1" not in text
    assert "group:" not in text

"""POST /plan of a multi-node manifest through the API function: the answer Powertools validates carries the
group (its size, its EFA, how a lost node is replaced) and each pool's price for the whole group."""

from __future__ import annotations

from tests.integration.api_client import call

NODES = 3
GROUP = {
    "name": "planned-group",
    "resources": {"instance_types": ["g5.8xlarge", "g5.xlarge"], "nodes": NODES},
    "capacity": {"replace_node_minutes": 5},
    "training": {"command": ["torchrun", "--nproc-per-node", "1", "train.py"], "hang_minutes": 2},
}


def test_a_groups_plan_says_where_it_lands_at_what_group_price_and_with_which_network(
    deployment, lambda_context
):
    # Given a three-node manifest whose candidates are one type with an EFA and one without
    # When it is planned through the API
    answer = call(lambda_context, "POST", "/plan", GROUP)
    # Then the answer is the plan, with the group as the manifest asks for it
    assert answer.status == 200, answer.body
    group = answer.body["group"]
    assert group == {
        "nodes": NODES,
        "efa": False,
        "efa_requested": True,
        "types_without_efa": ["g5.xlarge"],
        "replace_node_minutes": 5,
        "hang_minutes": 2,
    }
    # And every pool is priced for one node and for the group of three
    assert answer.body["pools"]
    for pool in answer.body["pools"]:
        listed = pool["on_demand_price_per_hour"]
        assert pool["group_on_demand_price_per_hour"] == round(NODES * listed, 6)
        spot = pool["spot_price_per_hour"]
        assert pool["group_spot_price_per_hour"] == (None if spot is None else round(NODES * spot, 6))


def test_a_single_node_plan_has_no_group(deployment, lambda_context):
    answer = call(
        lambda_context, "POST", "/plan", {"name": "one", "training": {"command": ["python", "t.py"]}}
    )
    assert answer.status == 200, answer.body
    assert answer.body["group"] is None

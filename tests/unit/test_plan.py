"""The plan use case over fakes: pools in acquisition's order with both prices, the lifecycle choice, the skipped
pools, the estimate, the deadline's first decision, and every admission problem at once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from spotrun.control.views.plan import plan_job
from spotrun.control.views.plan_model import JobPlan
from spotrun.model.capacity.candidates import candidate_types
from spotrun.model.capacity.fleet_request import build_fleet_request
from spotrun.model.capacity.pricing import on_demand_price
from spotrun.model.manifest.parse import parse_manifest_document
from tests.unit.fakes import FakeCompute, FakeObjects

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
ZONES = {"subnet-a": "us-east-1a", "subnet-b": "us-east-1b"}
# Spot prices out of the request's order (g4dn first, by on-demand price): the plan sorts them.
SPOT = {
    ("g4dn.xlarge", "us-east-1a"): 0.30,
    ("g4dn.xlarge", "us-east-1b"): 0.22,
    ("g5.xlarge", "us-east-1a"): 0.25,
    ("g5.xlarge", "us-east-1b"): None,  # no price history
}


class PricedCompute(FakeCompute):
    """EC2 whose pools each have their own spot price."""

    def spot_prices(self, instance_types: list[str]) -> dict[tuple[str, str], float]:
        return {key: price for key, price in SPOT.items() if price is not None and key[0] in instance_types}


def document(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "planned",
        "resources": {"instance_types": ["g4dn.xlarge", "g5.xlarge"]},
        "training": {"command": ["python", "train.py"]},
    }
    for section, values in changes.items():
        base[section] = {**base.get(section, {}), **values}
    return base


def plan_of(
    doc: dict[str, Any], objects: FakeObjects | None = None, secret_references: tuple[str, ...] = ()
) -> JobPlan:
    return plan_job(
        parse_manifest_document(doc),
        compute=PricedCompute(ZONES),
        objects=objects or FakeObjects(),
        subnet_ids=tuple(ZONES),
        archive_buckets=("spotrun-archive",),
        jobs_bucket="jobs",
        now=T0,
        time_scale=1.0,
        secret_references=secret_references,
    )


def pools(plan: JobPlan) -> list[tuple[str, str, str]]:
    return [(p.instance_type, p.availability_zone, p.lifecycle) for p in plan.pools]


def test_spot_pools_come_cheapest_first_then_the_fallback_by_on_demand_price():
    # Given a two-type job with the on-demand fallback
    plan = plan_of(document(capacity={"on_demand_fallback": True}))
    # Then spot is tried first, by today's price (the unpriced pool last), then on-demand by its price
    assert plan.lifecycle == "spot"
    assert plan.fallback == "on-demand"
    assert pools(plan) == [
        ("g4dn.xlarge", "us-east-1b", "spot"),
        ("g5.xlarge", "us-east-1a", "spot"),
        ("g4dn.xlarge", "us-east-1a", "spot"),
        ("g5.xlarge", "us-east-1b", "spot"),
        ("g4dn.xlarge", "us-east-1a", "on-demand"),
        ("g4dn.xlarge", "us-east-1b", "on-demand"),
        ("g5.xlarge", "us-east-1a", "on-demand"),
        ("g5.xlarge", "us-east-1b", "on-demand"),
    ]
    # And each pool carries both prices, the first one marked
    first = plan.pools[0]
    assert plan.first_pool == first
    assert [p.first for p in plan.pools] == [True] + [False] * 7
    assert first.spot_price_per_hour == 0.22
    assert first.on_demand_price_per_hour == on_demand_price("g4dn.xlarge", "us-east-1")
    assert [p.order for p in plan.pools] == list(range(1, 9))
    assert plan.ok


def test_without_the_fallback_only_spot_is_tried():
    # Given the default capacity policy (no on-demand fallback)
    plan = plan_of(document())
    # Then the plan has no on-demand pool
    assert plan.fallback is None
    assert {p.lifecycle for p in plan.pools} == {"spot"}


def test_spot_false_plans_on_demand_only():
    # Given spot switched off
    plan = plan_of(document(capacity={"spot": False}))
    # Then on-demand is bought from the start, cheapest type first
    assert (plan.lifecycle, plan.fallback) == ("on-demand", None)
    assert [p.instance_type for p in plan.pools] == ["g4dn.xlarge"] * 2 + ["g5.xlarge"] * 2


def test_pools_priced_above_max_price_are_skipped_not_tried():
    # Given a spot ceiling below two pools' prices
    plan = plan_of(document(capacity={"max_price_per_hour": 0.26}))
    # Then those pools are listed as skipped, with the limit, and not among the pools tried
    assert [(p.instance_type, p.availability_zone) for p in plan.skipped] == [("g4dn.xlarge", "us-east-1a")]
    assert plan.skipped[0].limit_per_hour == 0.26
    assert ("g4dn.xlarge", "us-east-1a", "spot") not in pools(plan)


def test_the_plan_offers_exactly_the_pools_of_acquisitions_fleet_request():
    # Given the fleet request launch_instance would send for the same manifest
    request = spot_fleet_request(document())
    # Then the plan's pools are those, no more and no fewer
    assert {(p.instance_type, p.availability_zone) for p in plan_of(document()).pools} == offered_pools(
        request
    )


def spot_fleet_request(doc: dict[str, Any], *, nodes: int = 1, **options: Any) -> dict[str, Any]:
    """The spot fleet request acquisition sends for ``doc`` in :data:`ZONES` (``options``: more of its arguments)."""
    manifest = parse_manifest_document(doc)
    return build_fleet_request(
        candidates=candidate_types(manifest.resources),
        subnets=ZONES,
        launch_template_name="t",
        lifecycle="spot",
        max_price_per_hour=None,
        avoid_pools=(),
        nodes=nodes,
        tags={},
        **options,
    )


def offered_pools(request: dict[str, Any]) -> set[tuple[str, str]]:
    """The (instance type, zone) pools a fleet request's overrides offer."""
    return {
        (o["InstanceType"], ZONES[o["SubnetId"]]) for o in request["LaunchTemplateConfigs"][0]["Overrides"]
    }


def test_the_estimate_prices_expected_hours_on_the_first_pool_of_each_lifecycle():
    # Given 3 h of work with a deadline (expected_hours comes with one)
    plan = plan_of(document(capacity={"deadline": "36h"}, training={"expected_hours": 3}))
    # Then spot is priced at the first pool's price and on-demand at the cheapest on-demand price
    assert plan.estimate is not None
    assert plan.estimate.spot_usd == round(0.22 * 3, 4)
    assert plan.estimate.on_demand_usd == round(on_demand_price("g4dn.xlarge", "us-east-1") * 3, 4)
    # And the deadline policy's first decision is given
    assert plan.deadline is not None
    assert plan.deadline.startswith("spot, slack ")


def test_without_expected_hours_there_is_no_estimate():
    assert plan_of(document()).estimate is None


def test_every_admission_problem_is_listed_not_only_the_first():
    # Given an archive bucket the deployment may not use, and a data prefix that holds nothing
    doc = document(
        archive={"destination": "s3://elsewhere/models/"},
        data={"inputs": [{"source": "s3://jobs/datasets/empty/", "destination": "."}]},
    )
    # When it is planned
    plan = plan_of(doc)
    # Then both problems are listed, and the plan is not ok (the pools are still shown)
    assert [line.split(":")[0] for line in plan.problems] == ["archive.destination", "data.inputs[0].source"]
    assert not plan.ok
    assert plan.pools


def test_a_manifest_no_type_matches_is_planned_with_its_problem_and_no_pool():
    # Given a deadline job asking for a GPU count no catalog type has (the policy has no price to decide on)
    doc = document(capacity={"deadline": "36h"}, training={"expected_hours": 3})
    doc["resources"] = {"gpus_per_node": 5}
    # When it is planned
    plan = plan_of(doc)
    # Then the answer is the problem, without pools, estimate prices or a decision
    assert plan.problems[0].startswith("resources: ")
    assert (plan.pools, plan.first_pool, plan.deadline) == ([], None, None)


def test_a_secret_the_deployment_allows_is_no_problem_and_one_it_does_not_is():
    # Given a manifest naming a secret, and a deployment that allows the secrets under training/
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:training/db-AbCdEf"
    doc = document(training={"secrets": {"DB_PASSWORD": arn}})
    allowed = ("arn:aws:secretsmanager:us-east-1:123456789012:secret:training/*",)

    # When it is planned with and without that pattern among the allowed references
    granted, refused = plan_of(doc, secret_references=allowed), plan_of(doc)

    # Then, as POST /jobs would, the plan admits it where the deployment allows it, and only there
    assert granted.problems == []
    assert granted.ok
    assert not refused.ok
    assert any(problem.startswith("training.secrets") for problem in refused.problems)

"""The emulator's capacity model: which pool an instant fleet gets, and when none can serve."""

from __future__ import annotations

import datetime as dt

import pytest

from spotrun.local.capacity.catalog import INSTANCE_TYPES, Pool, default_pools, types_matching
from spotrun.local.capacity.pools import INSUFFICIENT_CAPACITY, MAX_PRICE_TOO_LOW, Candidate, CapacityModel


def _pools() -> list[Pool]:
    return [
        Pool("g5.xlarge", "us-east-1a", spot_price=0.40, capacity=2, boot_delay_seconds=60),
        Pool("g5.xlarge", "us-east-1b", spot_price=0.30, capacity=1, boot_delay_seconds=60),
        Pool("g6.xlarge", "us-east-1a", spot_price=0.35, capacity=3, boot_delay_seconds=60),
    ]


def _candidates(max_price: float | None = None) -> list[Candidate]:
    keys = [("g5.xlarge", "us-east-1a"), ("g5.xlarge", "us-east-1b"), ("g6.xlarge", "us-east-1a")]
    return [Candidate(i, t, z, max_price=max_price) for i, (t, z) in enumerate(keys)]


def test_plan_takes_the_cheapest_pool_with_free_capacity() -> None:
    # Given three pools, the cheapest in us-east-1b
    model = CapacityModel(_pools())

    # When one spot instance is planned
    plan = model.plan(_candidates(), "spot", 1, "price-capacity-optimized")

    # Then it goes to the cheapest pool and nothing is short
    assert [(c.instance_type, c.availability_zone, n) for c, n in plan.allocations] == [
        ("g5.xlarge", "us-east-1b", 1)
    ]
    assert plan.shortfalls == []


def test_plan_skips_a_full_pool_for_the_next_cheapest() -> None:
    # Given the cheapest pool is held by a running instance
    model = CapacityModel(_pools())
    model.allocate("i-1", "g5.xlarge", "us-east-1b", "spot")

    # When one spot instance is planned
    plan = model.plan(_candidates(), "spot", 1)

    # Then the next cheapest pool serves it
    assert [(c.instance_type, c.availability_zone) for c, _ in plan.allocations] == [
        ("g6.xlarge", "us-east-1a")
    ]


def test_plan_ignores_pools_priced_above_the_max_price() -> None:
    # Given a max price below g6 (0.35) and g5 in 1a (0.40), and the cheap pool (0.30) full
    model = CapacityModel(_pools())
    model.exhaust("g5.xlarge", "us-east-1b")

    # When one spot instance is planned at most 0.32/h
    plan = model.plan(_candidates(max_price=0.32), "spot", 1)

    # Then nothing launches and each candidate says why
    assert plan.allocations == []
    codes = {(s.candidate.instance_type, s.candidate.availability_zone): s.code for s in plan.shortfalls}
    assert codes == {
        ("g5.xlarge", "us-east-1a"): MAX_PRICE_TOO_LOW,
        ("g5.xlarge", "us-east-1b"): INSUFFICIENT_CAPACITY,
        ("g6.xlarge", "us-east-1a"): MAX_PRICE_TOO_LOW,
    }


def test_plan_reports_insufficient_capacity_when_every_pool_is_full() -> None:
    # Given every pool exhausted
    model = CapacityModel(_pools())
    for pool in _pools():
        model.exhaust(pool.instance_type, pool.availability_zone)

    # When one spot instance is planned
    plan = model.plan(_candidates(), "spot", 1)

    # Then nothing launches, with InsufficientInstanceCapacity for every candidate
    assert plan.launched == 0
    assert {s.code for s in plan.shortfalls} == {INSUFFICIENT_CAPACITY}
    assert len(plan.shortfalls) == 3
    assert "us-east-1a" in plan.shortfalls[0].message


def test_releasing_an_instance_frees_its_slot() -> None:
    # Given the single slot of a pool held
    model = CapacityModel([Pool("p5.48xlarge", "us-east-1c", 30.0, capacity=1)])
    model.allocate("i-1", "p5.48xlarge", "us-east-1c", "spot")
    candidates = [Candidate(0, "p5.48xlarge", "us-east-1c")]
    assert model.plan(candidates, "spot", 1).launched == 0

    # When the instance ends
    model.release("i-1")

    # Then the pool can serve again
    assert model.free("p5.48xlarge", "us-east-1c") == 1
    assert model.plan(candidates, "spot", 1).launched == 1


def test_a_request_larger_than_one_pool_spreads_over_pools() -> None:
    # Given pools of 1 (0.30), 3 (0.35) and 2 (0.40)
    model = CapacityModel(_pools())

    # When five instances are planned
    plan = model.plan(_candidates(), "spot", 5)

    # Then the cheapest pools fill first
    assert [(c.availability_zone, c.instance_type, n) for c, n in plan.allocations] == [
        ("us-east-1b", "g5.xlarge", 1),
        ("us-east-1a", "g6.xlarge", 3),
        ("us-east-1a", "g5.xlarge", 1),
    ]


def test_capacity_optimized_prefers_the_emptiest_pool() -> None:
    # Given pools with 2, 1 and 3 free slots
    model = CapacityModel(_pools())

    # When planned with the capacity-optimized strategy
    plan = model.plan(_candidates(), "spot", 1, "capacity-optimized")

    # Then the pool with the most free capacity wins over the cheaper ones
    assert plan.allocations[0][0].instance_type == "g6.xlarge"


def test_on_demand_uses_its_own_capacity_and_the_cheapest_type() -> None:
    # Given spot exhausted everywhere
    model = CapacityModel(_pools())
    for pool in _pools():
        model.exhaust(pool.instance_type, pool.availability_zone)

    # When one on-demand instance is planned
    plan = model.plan(_candidates(), "on-demand", 1)

    # Then it launches, on the type with the lowest on-demand price (g6.xlarge < g5.xlarge)
    assert plan.launched == 1
    assert plan.allocations[0][0].instance_type == "g6.xlarge"


def test_price_history_gives_the_price_in_effect_at_start_and_later_changes() -> None:
    # Given a pool whose price changes twice
    clock = [dt.datetime(2025, 1, 1, 12, 0, tzinfo=dt.UTC)]
    model = CapacityModel([Pool("g5.xlarge", "us-east-1a", 0.30, 4)], now=lambda: clock[0])
    clock[0] += dt.timedelta(hours=2)
    model.set_price("g5.xlarge", "us-east-1a", 0.50)
    clock[0] += dt.timedelta(hours=2)
    model.set_price("g5.xlarge", "us-east-1a", 0.45)

    # When the history from 13:00 on is asked for
    start = dt.datetime(2025, 1, 1, 13, 0, tzinfo=dt.UTC)
    records = model.price_history(["g5.xlarge"], None, start)

    # Then the three prices come newest first, the first one being the one in effect at 13:00
    assert [price for *_, price in records] == [0.45, 0.50, 0.30]
    assert model.price("g5.xlarge", "us-east-1a") == 0.45


def test_default_pools_are_deterministic_and_priced_like_spot() -> None:
    # Given / When the default table is drawn twice with one seed and once with another
    first, again, other = default_pools(7), default_pools(7), default_pools(8)

    # Then the same seed gives the same table, every GPU type is offered in the four zones,
    # and spot prices are 30-40 % of on-demand
    assert first == again
    assert first != other
    assert {p.instance_type for p in first} == set(INSTANCE_TYPES)
    assert {p.availability_zone for p in first} == {"us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"}
    for pool in first:
        ratio = pool.spot_price / INSTANCE_TYPES[pool.instance_type].on_demand_usd_per_hour
        assert 0.29 <= ratio <= 0.41
        assert pool.capacity >= 1


def test_duplicate_pools_are_refused() -> None:
    # Given / When / Then
    with pytest.raises(ValueError, match="duplicate"):
        CapacityModel([Pool("g5.xlarge", "us-east-1a", 0.3, 1), Pool("g5.xlarge", "us-east-1a", 0.4, 1)])


def test_instance_requirements_select_gpu_types() -> None:
    # Given requirements for one NVIDIA A10G or L4 with 16 GiB of memory and 4 vCPUs or more
    requirements = {
        "VCpuCount": {"Min": 4},
        "MemoryMiB": {"Min": 16_000},
        "AcceleratorCount": {"Min": 1, "Max": 1},
        "AcceleratorManufacturers": ["nvidia"],
        "AcceleratorNames": ["a10g", "l4"],
    }

    # When matched against the catalogue
    matched = types_matching(requirements)

    # Then the single-GPU A10G and L4 types match, nothing else
    assert matched == ["g5.xlarge", "g5.2xlarge", "g6.xlarge"]
    assert types_matching({**requirements, "ExcludedInstanceTypes": ["g5.*"]}) == ["g6.xlarge"]
    assert types_matching({"AcceleratorTotalMemoryMiB": {"Min": 600_000}}) == ["p5.48xlarge"]


def test_the_model_keeps_when_each_instance_held_its_slot() -> None:
    # Given a model on a clock the test moves
    times = iter(dt.datetime(2026, 12, 1, 12, 0, s, tzinfo=dt.UTC) for s in (0, 5, 42, 50))
    model = CapacityModel(_pools(), now=lambda: next(times))
    # When an instance launches at 12:00:05 and is terminated at 12:00:42 (a second release changes nothing)
    model.allocate("i-1", "g5.xlarge", "us-east-1a", "spot")
    assert model.held("i-1") == (dt.datetime(2026, 12, 1, 12, 0, 5, tzinfo=dt.UTC), None)
    model.release("i-1")
    model.release("i-1")
    # Then both times are kept, what EC2 bills; an instance never launched has none
    assert model.held("i-1") == (
        dt.datetime(2026, 12, 1, 12, 0, 5, tzinfo=dt.UTC),
        dt.datetime(2026, 12, 1, 12, 0, 42, tzinfo=dt.UTC),
    )
    assert model.held("i-2") is None

"""Unit tests of spotrun.model.capacity.candidates: candidate types, pools to avoid, the fallback policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from spotrun.model.capacity.candidates import Pool, avoid_list, candidate_types, choose_lifecycle
from spotrun.model.capacity.pricing import GPU_CATALOG, InstanceTypeInfo
from spotrun.model.errors import ManifestInvalid
from spotrun.model.manifest.capacity import CapacityPolicy, Resources

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def names(types: list[InstanceTypeInfo]) -> list[str]:
    return [info.name for info in types]


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

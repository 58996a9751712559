"""The emulator's pools driven by a trace: capacity per tick, a reclaim through the notice path on a drop, and
the runtime's replay of a trace file."""

from __future__ import annotations

from spotrun.local.capacity.catalog import Pool
from spotrun.local.capacity.pools import CapacityModel
from spotrun.local.capacity.trace_pools import TracePools
from spotrun.local.runtime import LocalRuntime
from spotrun.model.simulation.traces import dumps_trace, parse_trace

POOL = ("g5.xlarge", "us-east-1a")


def replay(counts: list[int], seconds_per_hour: float = 36.0):
    """A 10-minute-tick trace over one pool (one trace hour in 36 s: a tick every 6 s)."""
    capacity = CapacityModel([Pool("g5.xlarge", "us-east-1a", spot_price=0.5, capacity=4)])
    text = f'{{"metadata": {{"gap_seconds": 600}}, "data": {counts}}}'
    interrupted: list[str] = []
    pools = TracePools(parse_trace("t", text), capacity, [POOL], interrupted.append, seconds_per_hour)
    return capacity, pools, interrupted


def test_each_tick_sets_the_pools_spot_capacity() -> None:
    # Given a trace 1, 0, 2 at one trace hour per 36 s
    capacity, pools, _ = replay([1, 0, 2])
    # When replayed at 0, 7 and 13 s (ticks 0, 1, 2) and far past the end
    seen = []
    for elapsed in (0.0, 7.0, 13.0, 1000.0):
        pools.apply(elapsed)
        seen.append(capacity.free(*POOL))
    # Then the pool's spot capacity follows the trace, and stays at its last count past the end
    assert seen == [1, 0, 2, 2]


def test_a_drop_reclaims_the_newest_spot_instances_once() -> None:
    # Given two spot instances in the pool and a trace going 2 -> 1 -> 1
    capacity, pools, interrupted = replay([2, 1, 1])
    pools.apply(0.0)
    capacity.allocate("i-old", *POOL, "spot")
    capacity.allocate("i-new", *POOL, "spot")
    # When the replay reaches the drop, and the next tick
    pools.apply(7.0)
    pools.apply(13.0)
    # Then the newest is reclaimed (through the notice path), once
    assert interrupted == ["i-new"]


def test_on_demand_is_not_reclaimed() -> None:
    # Given an on-demand instance in a pool whose spot count drops to zero
    capacity, pools, interrupted = replay([1, 0])
    pools.apply(0.0)
    capacity.allocate("i-od", *POOL, "on-demand")
    # When the drop comes, Then nothing is reclaimed
    pools.apply(7.0)
    assert interrupted == []


def test_a_runtime_given_a_trace_file_replays_it_at_its_time_scale_on_every_pool(tmp_path) -> None:
    # Given a trace file
    path = tmp_path / "t.json"
    path.write_text(dumps_trace(600, [1, 0]))
    # When a runtime is made with it, without a scale or pools (and with both)
    default = LocalRuntime(tmp_path / "a", time_scale=0.1, trace=path)
    chosen = LocalRuntime(tmp_path / "b", time_scale=0.1, trace=path, trace_scale=0.01, trace_pools=[POOL])
    # Then the trace plays at the emulated AWS's pace (a trace hour in 360 s at 0.1) on every pool, or as asked
    assert default.trace_pools is not None
    assert chosen.trace_pools is not None
    assert default.trace_pools.trace.capacity == (1, 0)
    assert default.trace_pools.seconds_per_hour == 360.0
    assert default.trace_pools.pools == [pool.key for pool in default.capacity.pools()]
    assert (chosen.trace_pools.seconds_per_hour, chosen.trace_pools.pools) == (36.0, [POOL])

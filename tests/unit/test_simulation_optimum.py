"""The omniscient optimum is the cost of a schedule that runs, and no schedule costs less.

The optimum is a dynamic programme (spotrun.model.simulation.optimum); these tests hold it to an independent,
naive replay of a schedule under the same job model (whole steps, a restart of ``restart_steps`` billed steps
after every start or switch, spot only where the trace has it, the finishing step billed for the part of it
the work needs): its own schedule must replay to its cost, and on tiny traces an exhaustive search over every
schedule must find no cheaper one, nor one that meets a deadline it calls unreachable.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotrun.model.deadline.state import run_rate
from spotrun.model.simulation.optimum import optimum
from spotrun.model.simulation.replay import Replay, SimJob, restart_steps

STEP = 0.5
INTERVAL = 1.0
JOB = SimJob(
    work_hours=4.0,
    deadline_hours=7.0,
    restart_hours=0.5,
    checkpoint_hours=0.1,
    spot_price=1.0,
    on_demand_price=3.0,
    checkpoint_interval_hours=INTERVAL,
    silent_fraction=0.0,
)
# Under 3 productive steps of work, so that every schedule of a few steps can be tried.
TINY = dataclasses.replace(JOB, work_hours=1.2)
MODES = ("idle", "spot", "od")


def replay_schedule(
    job: SimJob, replay: Replay, start: int, schedule: tuple[str, ...]
) -> tuple[float, float] | None:
    """The cost and completion (hours after the start) of running ``schedule`` from ``start``; None when it
    cannot run (spot where the trace has none, past the trace) or does not finish by the deadline."""
    per_step = STEP * run_rate(job.checkpoint_hours, INTERVAL)
    boot = restart_steps(job, STEP)
    done, cost, running, restarting = 0.0, 0.0, "idle", 0
    for s, mode in enumerate(schedule):
        if start + s >= replay.steps or (mode == "spot" and not replay.spot[start + s]):
            return None
        if mode != running:
            running, restarting = mode, boot
        if mode == "idle":
            continue
        price = (job.spot_price if mode == "spot" else job.on_demand_price) * STEP
        if restarting:
            restarting -= 1
            cost += price
            continue
        left = job.work_hours - done
        if left <= per_step + 1e-9:
            fraction = left / per_step
            completion = (s + fraction) * STEP
            return (cost + price * fraction, completion) if completion <= job.deadline_hours + 1e-9 else None
        done += per_step
        cost += price
    return None


def cheapest_by_search(job: SimJob, replay: Replay, steps: int) -> float | None:
    """The least cost over every schedule of ``steps`` steps: the exhaustive search."""
    costs = [
        result[0]
        for schedule in itertools.product(MODES, repeat=steps)
        if (result := replay_schedule(job, replay, 0, schedule)) is not None
    ]
    return min(costs) if costs else None


@settings(max_examples=80, deadline=None)
@given(
    spot=st.lists(st.booleans(), min_size=24, max_size=24).map(tuple),
    restart_hours=st.sampled_from([0.0, 0.5, 1.0]),
    start=st.sampled_from([0, 3]),
)
def test_the_optimums_schedule_runs_and_costs_what_the_optimum_reports(
    spot: tuple[bool, ...], restart_hours: float, start: int
) -> None:
    # Given any trace, a restart of 0, 1 or 2 steps, and a start at the trace's beginning or later
    job = dataclasses.replace(JOB, restart_hours=restart_hours)
    replay = Replay(STEP, spot)
    # When the optimum is computed with its schedule
    best = optimum(job, replay, start, INTERVAL, record=True)
    # Then (on-demand always being feasible here) its schedule runs on this trace, meets the deadline, and costs
    # exactly what the optimum reports: not less, not more
    assert best.cost is not None
    assert best.completion_hours is not None
    replayed = replay_schedule(job, replay, start, best.schedule)
    assert replayed is not None, best.schedule
    assert replayed[0] == pytest.approx(best.cost, abs=1e-9), best.schedule
    assert replayed[1] == pytest.approx(best.completion_hours, abs=1e-9), best.schedule


@pytest.mark.parametrize("restart_hours", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("deadline_hours", [2.0, 2.9])
def test_no_schedule_of_a_tiny_trace_beats_the_optimum(restart_hours: float, deadline_hours: float) -> None:
    # Given every spot trace of 6 half-hour steps, a job of 3 productive steps, and a deadline that a restart
    # of 2 steps makes unreachable (2 h) or not (2.9 h)
    job = dataclasses.replace(TINY, restart_hours=restart_hours, deadline_hours=deadline_hours)
    reachable = 0
    for spot in itertools.product((False, True), repeat=6):
        replay = Replay(STEP, spot)
        # When the optimum is computed, and every one of the 729 schedules is tried
        best = optimum(job, replay, 0, INTERVAL)
        searched = cheapest_by_search(job, replay, 6)
        # Then both agree on whether the deadline can be met, and on its least cost
        if searched is None:
            assert best.cost is None, spot
            continue
        reachable += 1
        assert best.cost == pytest.approx(searched, abs=1e-9), spot
    # And the cases covered both outcomes where they should: a 2-step restart cannot meet the 2 h deadline
    assert reachable == (0 if (restart_hours, deadline_hours) == (1.0, 2.0) else 64)


def test_the_search_tells_spot_from_on_demand_and_a_restart_from_training() -> None:
    # Given the tiny job with a one-step restart, spot at every step
    job = dataclasses.replace(TINY, restart_hours=0.5)
    replay = Replay(STEP, (True,) * 6)
    # When the search's replay runs a spot schedule, an on-demand one, and a spot one with a switch midway
    spot_only = replay_schedule(job, replay, 0, ("spot",) * 6)
    on_demand = replay_schedule(job, replay, 0, ("od",) * 6)
    switched = replay_schedule(job, replay, 0, ("spot", "spot", "od", "od", "od", "od"))
    # Then each pays its restart step, each step at its price, and the switch a second restart
    per_step = STEP * run_rate(job.checkpoint_hours, INTERVAL)
    fraction = job.work_hours / per_step - 2
    assert spot_only == pytest.approx((0.5 * (3 + fraction), (3 + fraction) * STEP))
    assert on_demand == pytest.approx((1.5 * (3 + fraction), (3 + fraction) * STEP))
    assert switched == pytest.approx((0.5 * 2 + 1.5 * (2 + fraction), (4 + fraction) * STEP))
    # And the optimum pays the spot schedule
    assert optimum(job, replay, 0, INTERVAL).cost == pytest.approx(spot_only[0])

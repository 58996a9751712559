"""The deadline policies' decisions, one rule at a time (spotrun.model.deadline.state)."""

from __future__ import annotations

import dataclasses

import pytest

from spotrun.model.deadline.policies import decide, spot_stint_pays, wait_reserve_hours
from spotrun.model.deadline.state import (
    Choice,
    JobState,
    PolicyParams,
    Running,
    deadline_feasible,
    default_params,
    on_demand_finish_hours,
    slack_hours,
)

# Checkpoint cost 0 makes the training rate 1: hours of work are hours of running, and slack is easy to read.
STATE = JobState(
    work_hours=10.0,
    work_done_hours=0.0,
    elapsed_hours=0.0,
    deadline_hours=20.0,
    restart_hours=0.5,
    checkpoint_hours=0.0,
    checkpoint_interval_hours=1.0,
    running=Running.NOTHING,
    spot_available=True,
    spot_price=1.0,
    on_demand_price=3.0,
)
PARAMS = PolicyParams(safety_hours=1.0, hysteresis_hours=1.0, reserve_per_work_hour=0.1)


def at(**changes: object) -> JobState:
    return dataclasses.replace(STATE, **changes)  # type: ignore[arg-type]


def test_slack_counts_the_changeover_onto_on_demand_unless_already_there() -> None:
    # Given a job 10 h of work from the end with 20 h left
    # When it runs nothing, and when it runs on-demand
    # Then the slack is 20 - 10 - 0.5 restart, and 20 - 10 without the restart
    assert slack_hours(STATE) == pytest.approx(9.5)
    assert slack_hours(at(running=Running.ON_DEMAND)) == pytest.approx(10.0)


def test_on_demand_finish_accounts_for_the_checkpoint_time() -> None:
    # Given saves that take a quarter of the interval
    state = at(checkpoint_hours=0.25, checkpoint_interval_hours=1.0, running=Running.ON_DEMAND)
    # When the on-demand finish is computed
    # Then the 10 h of work take 12.5 h of running
    assert on_demand_finish_hours(state) == pytest.approx(12.5)


def test_deadline_feasible_refuses_what_on_demand_cannot_meet() -> None:
    # Given 10 h of work and a 0.5 h restart
    # When the deadline is 10.4 h, then 10.5 h
    refused, short = deadline_feasible(10.0, 10.4, 0.5, 0.0, 1.0)
    accepted, exact = deadline_feasible(10.0, 10.5, 0.5, 0.0, 1.0)
    # Then the first is refused, naming the shortfall, and the second (exactly enough) is accepted
    assert (refused, short) == (False, pytest.approx(-0.1))
    assert (accepted, exact) == (True, pytest.approx(0.0))


def test_deadline_feasible_counts_the_saves() -> None:
    # Given saves that take as long as the interval (half the running time trains)
    # When the deadline would do for the work alone
    ok, _ = deadline_feasible(10.0, 15.0, 0.0, 1.0, 1.0)
    # Then it is refused: 20 h of running are needed
    assert not ok


def test_on_demand_only_always_chooses_on_demand() -> None:
    assert decide("on-demand", STATE, PARAMS).choice is Choice.ON_DEMAND


def test_spot_only_waits_when_spot_is_gone_even_past_the_deadline() -> None:
    # Given no spot and no slack left
    state = at(spot_available=False, elapsed_hours=19.0)
    # When spot-only decides
    # Then it waits for spot
    assert decide("spot-only", state, PARAMS).choice is Choice.WAIT


def test_greedy_moves_to_on_demand_at_the_safety_margin_and_stays() -> None:
    # Given slack just above, then at, the safety margin (9.5 h of slack at the start)
    above = decide("greedy", at(elapsed_hours=8.4), PARAMS)
    at_margin = decide("greedy", at(elapsed_hours=8.5), PARAMS)
    # When it is on on-demand with plenty of slack
    stays = decide("greedy", at(running=Running.ON_DEMAND), PARAMS)
    # Then spot, then on-demand, and on-demand for the rest
    assert above.choice is Choice.SPOT
    assert at_margin.choice is Choice.ON_DEMAND
    assert at_margin.slack_hours == pytest.approx(1.0)
    assert stays.choice is Choice.ON_DEMAND


def test_uniform_progress_follows_the_line() -> None:
    # Given, half-way to the deadline, a job ahead of the line (6 h of 10 done) and one behind it (4 h)
    ahead = at(elapsed_hours=10.0, work_done_hours=6.0)
    behind = at(elapsed_hours=10.0, work_done_hours=4.0)
    # When Uniform Progress decides
    # Then spot when ahead (wait if spot is gone), on-demand when behind
    assert decide("uniform-progress", ahead, PARAMS).choice is Choice.SPOT
    assert decide("uniform-progress", dataclasses.replace(ahead, spot_available=False), PARAMS).choice is (
        Choice.WAIT
    )
    assert decide("uniform-progress", behind, PARAMS).choice is Choice.ON_DEMAND


def test_uniform_progress_leaves_on_demand_only_past_the_hysteresis() -> None:
    # Given a job on on-demand, 0.5 h ahead of the line, then 1.5 h ahead (hysteresis 1 h)
    near = at(elapsed_hours=10.0, work_done_hours=5.5, running=Running.ON_DEMAND)
    far = at(elapsed_hours=10.0, work_done_hours=6.5, running=Running.ON_DEMAND)
    # When Uniform Progress decides
    # Then it stays on on-demand near the line and goes back to spot beyond the margin
    assert decide("uniform-progress", near, PARAMS).choice is Choice.ON_DEMAND
    assert decide("uniform-progress", far, PARAMS).choice is Choice.SPOT


def test_uniform_progress_has_the_safety_net() -> None:
    # Given a job ahead of the line but with the slack at the margin
    state = at(elapsed_hours=15.5, work_done_hours=7.0, deadline_hours=20.0)
    # When Uniform Progress decides
    # Then on-demand
    assert slack_hours(state) <= PARAMS.safety_hours
    assert decide("uniform-progress", state, PARAMS).choice is Choice.ON_DEMAND


def test_spotrun_waits_for_spot_only_above_its_reserve() -> None:
    # Given no spot; the reserve is the 1 h margin + two 0.5 h restarts + 10 h left x 0.1 = 3 h; the slack 9.5 h,
    # then 3.1 h, then 2.9 h
    plenty = at(spot_available=False)
    above = at(spot_available=False, elapsed_hours=6.4)
    little = at(spot_available=False, elapsed_hours=6.6)
    # When spotrun decides
    # Then it waits while the slack is above the reserve, on-demand within it
    assert wait_reserve_hours(little, PARAMS) == pytest.approx(3.0)
    assert decide("spotrun", plenty, PARAMS).choice is Choice.WAIT
    assert decide("spotrun", above, PARAMS).choice is Choice.WAIT
    assert decide("spotrun", little, PARAMS).choice is Choice.ON_DEMAND


def test_spotrun_moves_to_on_demand_with_the_slack_of_a_return_trip_left() -> None:
    # Given no preemption expected (the reserve is the 1 h margin + two 0.5 h restarts = 2 h), no spot, and the
    # slack at that reserve
    params = dataclasses.replace(PARAMS, reserve_per_work_hour=0.0)
    waited = at(spot_available=False, elapsed_hours=7.5 + 1e-6)
    assert decide("spotrun", waited, params).choice is Choice.ON_DEMAND
    # When spot comes back once the job runs on on-demand (its slack 0.5 h more: no restart onto it to count)
    back = at(running=Running.ON_DEMAND, spot_available=True, elapsed_hours=7.5 + 1e-6)
    # Then the slack left still pays for the two restarts of the trip back to spot: on-demand was not for good
    assert decide("spotrun", back, params).choice is Choice.SPOT


def test_spotrun_takes_spot_within_the_reserve_above_the_safety_margin() -> None:
    # Given spot obtainable and a slack of 1.9 h (within the reserve, above the margin)
    state = at(elapsed_hours=7.6)
    # When spotrun decides
    # Then spot: the reserve is for waiting, not for spot
    assert decide("spotrun", state, PARAMS).choice is Choice.SPOT


def test_spotrun_returns_to_spot_when_the_slack_pays_two_changeovers() -> None:
    # Given a job on on-demand with spot back: slack 2.1 h and 1.9 h (two restarts of 0.5 h + margin 1 h = 2 h)
    pays = at(running=Running.ON_DEMAND, elapsed_hours=7.9)
    short = at(running=Running.ON_DEMAND, elapsed_hours=8.1)
    # When spotrun decides
    # Then back to spot only when the slack pays for the round trip
    assert decide("spotrun", pays, PARAMS).choice is Choice.SPOT
    assert decide("spotrun", short, PARAMS).choice is Choice.ON_DEMAND


def test_spotrun_uses_on_demand_when_spot_costs_as_much() -> None:
    state = at(spot_price=3.0)
    assert decide("spotrun", state, PARAMS).choice is Choice.ON_DEMAND


def test_every_decision_carries_its_slack() -> None:
    # Given any state; When any policy decides; Then the decision's slack is the state's
    for name in ("on-demand", "spot-only", "greedy", "uniform-progress", "spotrun"):
        assert decide(name, STATE, PARAMS).slack_hours == pytest.approx(slack_hours(STATE))


def test_unknown_policy_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="known: on-demand"):
        decide("cheapest", STATE, PARAMS)


def test_default_params_reserve_an_interval_a_save_and_a_tick() -> None:
    # Given restart 0.5, save 0.1, interval 1, tick 0.25, preemptions every 10 h, all uncovered
    params = default_params(0.5, 0.1, 1.0, 0.25, spot_mtbf_hours=10.0, uncovered_fraction=1.0)
    # Then the margin is interval + save + tick (the restart is in the slack already, not counted twice), the
    # hysteresis two restarts, the reserve per work hour the round trip plus half an interval per preemption
    assert params.safety_hours == pytest.approx(1.35)
    assert params.hysteresis_hours == pytest.approx(1.0)
    assert params.reserve_per_work_hour == pytest.approx((1.0 + 0.25 + 0.5) / 10)
    assert default_params(0.5, 0.1, 1.0, 0.25).reserve_per_work_hour == 0.0


def test_spotrun_stays_on_on_demand_when_a_spot_stint_would_not_pay_its_changeovers() -> None:
    # Given a job on on-demand, plenty of slack, spot back; restarts of 0.5 h; prices 1 (spot) and 3 (on-demand)
    state = at(running=Running.ON_DEMAND)
    # When the pool's spot lasts 1.4 h between preemptions (under 3 x 1 h / 2 = 1.5 h), then 1.6 h
    short = dataclasses.replace(PARAMS, spot_mtbf_hours=1.4)
    long = dataclasses.replace(PARAMS, spot_mtbf_hours=1.6)
    # Then it stays on on-demand for the short stints and returns to spot for the long ones
    assert not spot_stint_pays(state, short)
    assert decide("spotrun", state, short).choice is Choice.ON_DEMAND
    assert spot_stint_pays(state, long)
    assert decide("spotrun", state, long).choice is Choice.SPOT

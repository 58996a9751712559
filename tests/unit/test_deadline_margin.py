"""The safety margin holds what a preemption can really lose: the time on spot since the last sure save, at most an
interval (spotrun.model.deadline.state.default_params, exposed_hours, stint_hours)."""

from __future__ import annotations

import dataclasses

import pytest

from spotrun.model.deadline.policies import decide
from spotrun.model.deadline.state import Choice, JobState, Running, default_params, exposed_hours, slack_hours

# The bench's job: a 20-minute restart, a 1-minute save (the notice covers it), the 4 h cap `auto` reaches with
# a reliable notice, 20-minute decisions; p3.2xlarge's prices; the prior's 24 h between preemptions, 5 % silent.
RESTART, SAVE, INTERVAL, TICK = 1 / 3, 1 / 60, 4.0, 1 / 3
ON_DEMAND = JobState(
    work_hours=24.0,
    work_done_hours=10.0,
    elapsed_hours=12.0,
    deadline_hours=36.0,
    restart_hours=RESTART,
    checkpoint_hours=SAVE,
    checkpoint_interval_hours=INTERVAL,
    running=Running.ON_DEMAND,
    spot_available=True,
    spot_price=0.918,
    on_demand_price=3.06,
)


def params(exposed: float):
    return default_params(
        RESTART, SAVE, INTERVAL, TICK, spot_mtbf_hours=24.0, uncovered_fraction=0.05, exposed_hours=exposed
    )


def with_slack(state: JobState, slack: float) -> JobState:
    """``state`` with its elapsed time set for ``slack`` hours of slack."""
    return dataclasses.replace(state, elapsed_hours=state.elapsed_hours + slack_hours(state) - slack)


def test_the_margin_is_what_the_time_on_spot_could_lose_capped_at_an_interval() -> None:
    # Given a job on spot for 0.5 h, and one on spot for 10 h (past its 4 h interval)
    # When the knobs are built
    short, long = params(exposed_hours(Running.SPOT, 0.5)), params(exposed_hours(Running.SPOT, 10.0))
    # Then the margin is what a silent preemption before the next decision takes (the half hour and a tick of
    # training), seen a tick late; and never more than an interval's work, its save and a tick (4.35 h)
    assert short.safety_hours == pytest.approx(0.5 + TICK + TICK)
    assert long.safety_hours == pytest.approx(INTERVAL + SAVE + TICK)
    # and a job on on-demand, or waiting, has nothing on spot to lose (a move onto spot saves first)
    assert exposed_hours(Running.ON_DEMAND, 5.0) == exposed_hours(Running.NOTHING, 5.0) == 0.0


def test_with_a_one_minute_save_and_the_4_h_cap_a_return_to_spot_is_not_blocked() -> None:
    # Given the job on on-demand with 3 h of slack and spot back: two restarts leave 2.33 h, under the whole
    # interval's 4.35 h margin, and a stint of 1.67 h before the growing margin would move it back pays for both
    state = with_slack(ON_DEMAND, 3.0)
    # When spotrun decides
    decision = decide("spotrun", state, params(exposed_hours(Running.ON_DEMAND, 0.0)))
    # Then it goes back to spot
    assert decision.choice is Choice.SPOT
    # but with 1.5 h of slack the stint it would allow (0.17 h) does not pay its two changeovers
    assert decide("spotrun", with_slack(ON_DEMAND, 1.5), params(0.0)).choice is Choice.ON_DEMAND


def test_on_spot_the_job_leaves_once_what_it_could_lose_reaches_the_slack() -> None:
    # Given the job on spot with 2 h of slack
    state = with_slack(dataclasses.replace(ON_DEMAND, running=Running.SPOT), 2.0)
    # When it has been on spot 1 h, then 1.5 h (1.5 + two ticks = 2.17 h of margin)
    early = decide("spotrun", state, params(exposed_hours(Running.SPOT, 1.0)))
    late = decide("spotrun", state, params(exposed_hours(Running.SPOT, 1.5)))
    # Then it stays, then moves to on-demand (the move saves: nothing is lost)
    assert early.choice is Choice.SPOT
    assert late.choice is Choice.ON_DEMAND


def test_a_waiting_job_launches_spot_only_for_a_stint_that_pays_its_changeover() -> None:
    # Given a job waiting, spot there, with 0.9 h of slack: a launch leaves 0.57 h of slack on spot, under the
    # 0.67 h margin it starts with, so no stint before the margin moves it to on-demand; with 2 h, a 1 h stint
    # pays the extra restart
    waiting = dataclasses.replace(ON_DEMAND, running=Running.NOTHING)
    # When spotrun decides, Then on-demand for the first, spot for the second
    assert decide("spotrun", with_slack(waiting, 0.9), params(0.0)).choice is Choice.ON_DEMAND
    assert decide("spotrun", with_slack(waiting, 2.0), params(0.0)).choice is Choice.SPOT

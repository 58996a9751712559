"""The replay and the omniscient optimum (spotrun.model.simulation.replay, simulation_optimum, simulation_runs)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import spotrun.model.simulation.replay as simulation
from spotrun.agent.supervision.interval import choose_interval
from spotrun.model.deadline.inputs import SpotHistory
from spotrun.model.deadline.policies import POLICIES
from spotrun.model.deadline.state import Choice, Decision, JobState, PolicyParams, deadline_feasible, run_rate
from spotrun.model.job.interruption_rate import rate_from_counts
from spotrun.model.simulation.optimum import optimum
from spotrun.model.simulation.replay import (
    Replay,
    SimJob,
    online_interval,
    replay_policy,
    replayed_restart_hours,
    restart_steps,
    start_steps,
)
from spotrun.model.simulation.runs import OPTIMUM, replay_of, simulate_trace
from spotrun.model.simulation.traces import dumps_trace, parse_trace

# Half-hour steps, a one-step restart, saves every hour that take 6 minutes; the silent share 0 by default.
JOB = SimJob(
    work_hours=4.0,
    deadline_hours=7.0,
    restart_hours=0.5,
    checkpoint_hours=0.1,
    spot_price=1.0,
    on_demand_price=3.0,
    checkpoint_interval_hours=1.0,
    notice_hours=2 / 60,
    silent_fraction=0.0,
)
STEP = 0.5
flags = st.lists(st.booleans(), min_size=24, max_size=24).map(tuple)


def replay(spot: tuple[bool, ...]) -> Replay:
    return Replay(STEP, spot)


def covered(job: SimJob = JOB) -> SimJob:
    """The job with a save short enough for the notice: preemptions cost nothing but the restart."""
    return dataclasses.replace(job, checkpoint_hours=1 / 60)


@settings(max_examples=60, deadline=None)
@given(spot=flags, save_fits_the_notice=st.booleans())
def test_the_optimum_never_costs_more_than_a_policy_that_meets_the_deadline(
    spot: tuple[bool, ...], save_fits_the_notice: bool
) -> None:
    # Given any trace, and saves that fit the notice or not
    job = covered() if save_fits_the_notice else JOB
    # When every policy runs and the optimum is computed
    best = optimum(job, replay(spot), 0, 1.0)
    # Then the optimum exists (on-demand is feasible) and no policy that met the deadline paid less
    assert best.cost is not None
    for name in POLICIES:
        run = replay_policy(name, job, replay(spot), 0, 1.0)
        if run.deadline_met:
            assert best.cost <= run.cost + 1e-9, name


@settings(max_examples=60, deadline=None)
@given(spot=flags)
def test_on_demand_only_always_meets_a_feasible_deadline(spot: tuple[bool, ...]) -> None:
    # Given a deadline on-demand can meet
    assert deadline_feasible(
        JOB.work_hours, JOB.deadline_hours, JOB.restart_hours, JOB.checkpoint_hours, 1.0
    )[0]
    # When on-demand only runs on any trace
    run = replay_policy("on-demand", JOB, replay(spot), 0, 1.0)
    # Then it meets it, having never touched spot
    assert run.deadline_met
    assert run.spot_hours == 0


@settings(max_examples=80, deadline=None)
@given(spot=flags, silent=st.sampled_from([0.0, 0.3, 1.0]))
def test_spotrun_meets_the_deadline_whenever_greedy_does(spot: tuple[bool, ...], silent: float) -> None:
    # Given any trace and any share of silent preemptions
    job = dataclasses.replace(covered(), silent_fraction=silent)
    # When greedy and spotrun run
    greedy = replay_policy("greedy", job, replay(spot), 0, 1.0)
    ours = replay_policy("spotrun", job, replay(spot), 0, 1.0)
    # Then spotrun is never late where greedy is on time
    if greedy.deadline_met:
        assert ours.deadline_met


def test_with_spot_plentiful_spotrun_never_uses_on_demand() -> None:
    # Given spot at every step, and a slack (3.6 h) above the safety margin (2.1 h)
    job = dataclasses.replace(JOB, deadline_hours=8.5)
    run = replay_policy("spotrun", job, replay((True,) * 24), 0, 1.0)
    # Then it finishes on spot alone, at the spot price
    assert run.deadline_met
    assert run.on_demand_hours == 0
    assert run.cost == pytest.approx(run.spot_hours * job.spot_price)


def test_when_spot_disappears_spotrun_moves_to_on_demand_in_time() -> None:
    # Given spot for two steps, then never again
    run = replay_policy("spotrun", JOB, replay((True, True) + (False,) * 22), 0, 1.0)
    # Then it moves to on-demand and still meets the deadline
    assert run.on_demand_hours > 0
    assert run.deadline_met


def test_work_in_steps_is_replayed_as_the_control_plane_decides_before_its_estimate() -> None:
    # Given a far deadline (12 h for 4 h), spot gone for the first two steps, back, gone again at step 8, back at 11
    spot = (False, False) + (True,) * 6 + (False,) * 3 + (True,) * 13
    known = dataclasses.replace(JOB, deadline_hours=12.0)
    in_steps = dataclasses.replace(known, estimate_after_hours=1.0)
    # When spotrun's policy replays the job with its work known, and in steps (an estimate after 1 h of training)
    runs = [replay_policy("spotrun", job, replay(spot), 0, 1.0, record=True) for job in (known, in_steps)]
    # Then with the work known it waits for spot; in steps it buys on-demand (a wait cannot be judged) and goes
    # back to spot once spot is there and over half the time is left; once trained for its estimate, it decides
    # as the known job does (waits at step 8)
    choices = [[(step, d.choice.value) for step, d in run.decisions] for run in runs]
    assert choices[0] == [(0, "wait"), (2, "spot"), (8, "wait"), (11, "spot")]
    assert choices[1] == [(0, "on-demand"), (2, "spot"), (8, "wait"), (11, "spot")]
    assert all("not checked until the job reports progress" in d.reason for _, d in runs[1].decisions[:2])
    assert all(run.deadline_met for run in runs)
    # and the other policies, the comparisons, are given the work either way
    for policy in ("greedy", "uniform-progress"):
        assert replay_policy(policy, in_steps, replay(spot), 0, 1.0) == replay_policy(
            policy, known, replay(spot), 0, 1.0
        )


def test_spot_only_misses_the_deadline_that_spotrun_meets() -> None:
    spot = (True, True) + (False,) * 22
    assert not replay_policy("spot-only", JOB, replay(spot), 0, 1.0).deadline_met


def test_an_uncovered_preemption_loses_the_unsaved_work_a_covered_one_nothing() -> None:
    # Given spot for 3 steps (a restart, then 2 x 0.5 h x rate of training, under an interval of 1 h), then gone
    spot = (True, True, True) + (False,) * 21
    # When the save outlasts the notice (JOB: 6 minutes), and when it fits (1 minute)
    lost = replay_policy("spot-only", JOB, replay(spot), 0, 1.0)
    kept = replay_policy("spot-only", covered(), replay(spot), 0, 1.0)
    # Then the first loses the unsaved training and counts the failure; the second loses nothing
    rate = 1.0 / 1.1
    assert lost.uncovered_failures == 1
    assert lost.work_lost_hours == pytest.approx(2 * STEP * rate)
    assert kept.uncovered_failures == 0
    assert kept.work_lost_hours == 0


def test_silent_preemptions_lose_work_even_with_a_short_save() -> None:
    spot = (True, True, True) + (False,) * 21
    run = replay_policy(
        "spot-only", dataclasses.replace(covered(), silent_fraction=1.0), replay(spot), 0, 1.0
    )
    assert run.uncovered_failures == 1
    assert run.work_lost_hours > 0


def test_the_replay_asks_the_policy_entry_point_the_control_plane_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the policy entry point wrapped to record each call
    calls: list[str] = []
    real = simulation.decide

    def recording(policy, state, params):  # type: ignore[no-untyped-def]
        calls.append(policy)
        return real(policy, state, params)

    monkeypatch.setattr(simulation, "decide", recording)
    # When spotrun is replayed over a trace
    run = replay_policy("spotrun", JOB, replay((True,) * 24), 0, 1.0)
    # Then every step asked decide()
    assert run.completion_hours is not None
    assert calls
    assert set(calls) == {"spotrun"}
    assert len(calls) == round(run.completion_hours / STEP + 0.49)


def test_the_optimum_uses_on_demand_in_a_gap_rather_than_wait_when_it_knows_spot_will_not_return() -> None:
    # Given spot only at the very start; a restart costs 0.5 h
    spot = (True,) + (False,) * 23
    best = optimum(JOB, replay(spot), 0, 1.0)
    od = replay_policy("on-demand", JOB, replay(spot), 0, 1.0)
    # Then the optimum is exactly on-demand's cost (a spot step would only add a restart)
    assert best.cost == pytest.approx(od.cost)


def test_the_optimum_is_none_when_the_deadline_is_out_of_reach() -> None:
    job = dataclasses.replace(JOB, deadline_hours=3.0)
    assert optimum(job, replay((True,) * 24), 0, 1.0).cost is None


def test_start_times_spread_over_the_trace_leaving_the_deadline_inside() -> None:
    # Given 200 steps of 0.5 h and a 7 h deadline (14 steps)
    starts = start_steps(Replay(STEP, (True,) * 200), JOB, 50)
    # Then 50 starts from 0 to 186
    assert len(starts) == 50
    assert starts[0] == 0
    assert starts[-1] == 186
    with pytest.raises(ValueError, match="shorter than the deadline"):
        start_steps(Replay(STEP, (True,) * 10), JOB, 50)


def test_simulate_trace_summarises_every_policy_and_the_optimum_over_many_starts() -> None:
    # Given a 5-day trace of 10-minute ticks, spot for 5 hours in every 6
    trace = parse_trace("t.json", dumps_trace(600, ([1] * 30 + [0] * 6) * 20))
    job = dataclasses.replace(JOB, checkpoint_interval_hours=None, work_hours=6.0, deadline_hours=10.0)
    # When simulated from 50 starts at 20-minute steps
    report = simulate_trace(trace, job, starts=50, step_seconds=1200)
    # Then each policy has 50 runs, the optimum is last, and nothing beats it among those on time
    assert [s.policy for s in report.summaries] == [*POLICIES, OPTIMUM]
    assert all(s.runs == 50 for s in report.summaries)
    best = report.summary(OPTIMUM)
    assert best.deadlines_met == 50
    for name in ("on-demand", "greedy", "uniform-progress", "spotrun"):
        summary = report.summary(name)
        assert summary.deadlines_met == 50
        assert summary.mean_cost >= best.mean_cost - 1e-9
    assert report.summary("on-demand").savings_vs_on_demand == 0
    assert report.interval.formula == "daly"


def test_a_launch_into_absent_spot_capacity_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a policy that always asks for spot, on a trace without any
    monkeypatch.setattr(
        simulation, "decide", lambda policy, state, params: Decision(Choice.SPOT, 0.0, "spot!")
    )
    # When it is replayed
    run = replay_policy("spot-only", JOB, replay((False,) * 24), 0, 1.0)
    # Then nothing ran: no cost, no progress
    assert run.cost == 0
    assert run.spot_hours == 0
    assert run.completion_hours is None


@settings(max_examples=60, deadline=None)
@given(spot=flags, boot_steps=st.sampled_from([0, 1, 2]))
def test_the_optimum_traces_back_a_schedule_that_trains_a_step_at_a_time_to_the_end(
    spot: tuple[bool, ...], boot_steps: int
) -> None:
    # Given any trace and a restart of 0, 1 or 2 steps
    job = dataclasses.replace(JOB, restart_hours=boot_steps * STEP, deadline_hours=8.0)
    # When the optimum is computed with its schedule
    best = optimum(job, replay(spot), 0, 1.0, record=True)
    plain = optimum(job, replay(spot), 0, 1.0)
    # Then the schedule starts at nothing, never loses work, trains at most a step's worth per step, ends with the
    # job done at the completion time, and recording changed nothing
    assert best.cost == plain.cost
    assert best.completion_hours == plain.completion_hours
    works = [w for _, w in best.progress]
    assert best.progress[0] == (0.0, 0.0)
    assert best.progress[-1] == (best.completion_hours, job.work_hours)
    per_step = STEP / 1.1
    assert all(0 <= b - a <= per_step + 1e-9 for a, b in itertools.pairwise(works))


def scripted(monkeypatch: pytest.MonkeyPatch, plan: dict[int, str]) -> list[JobState]:
    """Make the replay's policy follow ``plan`` (step -> choice, the last one holding), keeping the states seen."""
    seen: list[JobState] = []

    def decide(policy: str, state: JobState, params: PolicyParams) -> Decision:
        seen.append(state)
        step = round(state.elapsed_hours / STEP)
        choice = plan[max(s for s in plan if s <= step)]
        return Decision(Choice(choice), 0.0, "scripted")

    monkeypatch.setattr(simulation, "decide", decide)
    return seen


def test_a_move_between_on_demand_and_spot_saves_first_so_a_preemption_loses_only_spot_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a job that never saves on its own (a 10 h interval), every preemption silent; on-demand for steps 0-3
    # (a restart, then 1.5 h of training), spot from step 4 (a restart, one step of training), preempted at 6
    job = dataclasses.replace(JOB, checkpoint_interval_hours=10.0, silent_fraction=1.0, deadline_hours=12.0)
    scripted(monkeypatch, {0: "on-demand", 4: "spot"})
    spot = (True,) * 6 + (False,) * 18
    # When it is replayed
    run = replay_policy("spotrun", job, replay(spot), 0)
    # Then the preemption took the one step trained on spot, not the on-demand work the move saved, as the
    # control plane's move does (its notice: checkpoint, commit, end)
    assert run.uncovered_failures == 1
    assert run.work_lost_hours == pytest.approx(STEP * run_rate(job.checkpoint_hours, 10.0))


@pytest.mark.parametrize("tick_seconds", [1170, 1190, 1200])
def test_the_policy_counts_the_restart_the_replay_spends(tick_seconds: int) -> None:
    # Given a trace of 1,170, 1,190 or 1,200-second ticks replayed at 20-minute steps (one tick each), and a
    # 20-minute restart
    trace = parse_trace("t.json", dumps_trace(tick_seconds, [1] * 200))
    rep = replay_of(trace, 1200)
    job = dataclasses.replace(JOB, restart_hours=1 / 3, work_hours=4.0, deadline_hours=12.0)
    # When on-demand runs from the start
    run = replay_policy("on-demand", job, rep, 0, record=True)
    first = run.decisions[0][1]
    # Then the restart is one step in the replay, and the on-demand finish the policy's slack counted at the
    # start is the finish the replay made: one home for the restart in steps
    assert restart_steps(job, rep.step_hours) == 1
    assert replayed_restart_hours(job, rep.step_hours) == pytest.approx(tick_seconds / 3600)
    assert run.completion_hours == pytest.approx(job.deadline_hours - first.slack_hours)


def test_the_auto_interval_knows_only_the_preemptions_seen_so_far() -> None:
    # Given two traces alike for 12 steps, one then preempted every other step, with auto intervals, every
    # preemption silent
    job = dataclasses.replace(JOB, checkpoint_interval_hours=None, silent_fraction=1.0, work_hours=20.0)
    calm = (True,) * 48
    stormy = (True,) * 12 + (False, True) * 18
    # When spot-only replays both (a job that stays on spot whatever comes)
    runs = [replay_policy("spot-only", job, Replay(STEP, spot), 0, record=True) for spot in (calm, stormy)]
    # Then until the storm, the two runs were the same: the interval did not know what was to come
    assert runs[0].progress[:13] == runs[1].progress[:13]
    # and each attempt's interval is the agent's choice on the rate the control plane's estimator gives it
    for history in (SpotHistory(), SpotHistory(6.0, 3, 3), SpotHistory(100.0, 1, 0)):
        rate = rate_from_counts(history.spot_hours, history.preemptions, history.silent)
        agent = choose_interval(job.checkpoint_hours * 3600, rate, job.max_interval_hours)
        assert online_interval(job, history).interval_hours * 3600 == pytest.approx(agent.interval_seconds)

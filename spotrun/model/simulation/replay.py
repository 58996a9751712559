"""Replay a spot trace for one job under each deadline policy: cost, completion, deadline met, work lost.

Pure (standard library; no numpy, so it may sit in the model beside the policies it replays). At every step of
the resampled trace the replay builds the job's :class:`~spotrun.model.deadline.state.JobState` and asks
:func:`~spotrun.model.deadline.policies.decide`, the function the control plane calls, what to run. The omniscient
optimum, the limit the policies are compared to, is :mod:`spotrun.model.simulation.optimum`'s.

The job's model, shared by the replay, the policy's slack and the optimum:

- running time is billed at the instance's price per step; a launch (or a move between spot and on-demand)
  spends the restart, :func:`restart_steps` whole steps (the nearest to ``restart_hours``), before training
  resumes. The policy is told that same restart (:func:`replayed_restart_hours`): on a trace whose ticks are
  1,170 s apart a 20-minute restart is one step in the replay and in the slack alike;
- training advances ``interval / (interval + checkpoint)`` of the running time (the saves take the rest);
- a move between spot and on-demand (or off on-demand to wait) saves first, as the control plane's move does (it
  gives the agent the interruption notice: checkpoint, commit, end; :mod:`spotrun.control.capacity.deadline_moves`), so
  an attempt always starts from a checkpoint and nothing unsaved crosses a move;
- a preemption the notice covers loses nothing (the agent saves inside the notice); an uncovered one (every one
  when a save outlasts the notice, else the ``silent_fraction`` of them picked deterministically per step, the
  same for every policy) loses the work since the last save;
- ``auto`` interval: set at each launch from what the control plane knows then, the job's spot hours and
  preemptions so far with the prior (:func:`spotrun.model.job.interruption_rate.rate_from_counts`, the estimator
  the train command carries to the agent), never the trace's future.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from spotrun.model.checkpoint_interval import IntervalChoice, auto_interval, uncovered_fraction
from spotrun.model.deadline.inputs import SpotHistory, policy_params
from spotrun.model.deadline.policies import decide
from spotrun.model.deadline.state import (
    Choice,
    Decision,
    JobState,
    PolicyParams,
    Running,
    exposed_hours,
    run_rate,
)
from spotrun.model.deadline.stored_job import POLICY
from spotrun.model.deadline.work import decide_without_estimate
from spotrun.model.job.interruption_rate import rate_from_counts

# The fractional part of the golden ratio: i * PHI mod 1 spreads the "silent" preemptions evenly and
# reproducibly along a trace, without a random generator to seed.
_PHI = (math.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class SimJob:
    """The job replayed, in hours and prices per instance-hour.

    ``checkpoint_interval_hours`` None means ``auto`` (Daly on the uncovered-failure rate the control plane
    estimates at each launch, :func:`online_interval`, capped at ``max_interval_hours``).
    ``estimate_after_hours``: the work is in steps (``training.total_steps``), and spotrun's policy knows it
    only after that much training, deciding until then as the control plane does
    (:func:`~spotrun.model.deadline.work.decide_without_estimate`); None: the work is known from the start
    (``training.expected_hours``). The other policies are always given the work.
    """

    work_hours: float
    deadline_hours: float
    restart_hours: float
    checkpoint_hours: float
    spot_price: float
    on_demand_price: float
    checkpoint_interval_hours: float | None = None
    notice_hours: float = 2 / 60
    silent_fraction: float = 0.05
    max_interval_hours: float = 4.0
    estimate_after_hours: float | None = None


@dataclass
class RunResult:
    """One policy from one start time."""

    policy: str
    start_hours: float
    cost: float
    completion_hours: float | None  # after the start; None: not finished by the trace's end
    deadline_met: bool
    work_lost_hours: float
    uncovered_failures: int
    spot_hours: float
    on_demand_hours: float
    lost_work_bound_hours: float = 0.0  # Young/Daly's expectation for those failures, at each one's interval
    progress: list[tuple[float, float]] = field(
        default_factory=list
    )  # (hours after start, work done) if asked
    # (steps after start, decision) at each change of choice, if asked: what the control plane records
    decisions: list[tuple[int, Decision]] = field(default_factory=list)


@dataclass(frozen=True)
class Replay:
    """A trace resampled for replay: the step (hours) and whether spot is obtainable at each step."""

    step_hours: float
    spot: tuple[bool, ...]

    @property
    def steps(self) -> int:
        return len(self.spot)


def sim_job_from_state(state: JobState, notice_hours: float = 2 / 60) -> SimJob:
    """The job the control plane sees (its :class:`JobState` at submission), as the simulator replays it.

    The work, deadline, restart, save, interval and prices are the control plane's own inputs, so that the
    simulator and the control plane decide on the same numbers.
    """
    return SimJob(
        work_hours=state.work_hours,
        deadline_hours=state.deadline_hours,
        restart_hours=state.restart_hours,
        checkpoint_hours=state.checkpoint_hours,
        spot_price=state.spot_price,
        on_demand_price=state.on_demand_price,
        checkpoint_interval_hours=state.checkpoint_interval_hours,
        notice_hours=notice_hours,
    )


def is_silent(step: int, job: SimJob) -> bool:
    """Whether a preemption at this step comes without a notice (deterministic, the same for every policy)."""
    return (step * _PHI) % 1.0 < job.silent_fraction


def is_uncovered(step: int, job: SimJob) -> bool:
    """Whether a preemption at this step loses the unsaved work: a silent one, or any when a save outlasts the
    notice."""
    return job.checkpoint_hours > job.notice_hours or is_silent(step, job)


def online_interval(job: SimJob, history: SpotHistory) -> IntervalChoice:
    """The interval an attempt launched now trains at: the given one, or ``auto`` from what the job has seen.

    ``auto`` is the agent's rule (:func:`spotrun.agent.supervision.interval.choose_interval`) on the rate the
    control plane puts in the train command (:func:`spotrun.model.job.interruption_rate.rate_from_counts` of
    the job's spot hours, preemptions and silent ones so far, with the prior): only the past, as the control
    plane knows it.
    """
    rate = rate_from_counts(history.spot_hours, history.preemptions, history.silent)
    fraction = uncovered_fraction(job.checkpoint_hours, job.notice_hours, rate.silent_fraction)
    per_hour = rate.interruptions_per_hour * fraction
    uncovered_mtbf = 1 / per_hour if per_hour > 0 else math.inf
    if job.checkpoint_interval_hours is not None:
        return IntervalChoice(
            job.checkpoint_interval_hours, "daly", job.checkpoint_hours, uncovered_mtbf, False
        )
    return auto_interval(job.checkpoint_hours, uncovered_mtbf, job.max_interval_hours)


def interval_for(job: SimJob, replay: Replay) -> IntervalChoice:
    """The interval the job starts with (:func:`online_interval` before any spot time): the report's figure."""
    return online_interval(job, SpotHistory())


def optimum_interval(job: SimJob) -> float:
    """The optimum's interval: the given one; with ``auto``, the cap. The optimum saves before each preemption
    it knows of and loses nothing, so the longest interval allowed (the highest run rate) is its best: a lower
    bound for every online interval."""
    return (
        job.checkpoint_interval_hours if job.checkpoint_interval_hours is not None else job.max_interval_hours
    )


def params_for(
    job: SimJob,
    history: SpotHistory,
    interval_hours: float,
    tick_hours: float,
    restart_hours: float | None = None,
    exposed: float = math.inf,
) -> PolicyParams:
    """The policies' knobs at one step: the job's, the preemptions the run has seen so far and the time on spot
    a preemption could take (the control plane's inputs, :func:`spotrun.model.deadline.inputs.policy_params`).
    ``restart_hours``: the job's when None (the replay gives :func:`replayed_restart_hours`)."""
    return policy_params(
        history,
        restart_hours=job.restart_hours if restart_hours is None else restart_hours,
        checkpoint_hours=job.checkpoint_hours,
        checkpoint_interval_hours=interval_hours,
        tick_hours=tick_hours,
        notice_hours=job.notice_hours,
        exposed_hours=exposed,
    )


def restart_steps(job: SimJob, step_hours: float) -> int:
    """The one conversion of the restart into replay steps (the replay, the policy's slack and the optimum use
    it): the nearest whole number of steps, at least one for a restart that takes any time. Rounding up made a
    20-minute restart two steps on a trace of 1,170-s ticks (39 minutes); the nearest is within half a step."""
    if job.restart_hours <= 0:
        return 0
    return max(1, math.floor(job.restart_hours / step_hours + 0.5))


def replayed_restart_hours(job: SimJob, step_hours: float) -> float:
    """The restart as the replay spends it (:func:`restart_steps` steps): what the policy's slack counts."""
    return restart_steps(job, step_hours) * step_hours


def start_steps(replay: Replay, job: SimJob, count: int) -> list[int]:
    """``count`` start steps spread evenly over the trace, each leaving the whole deadline inside it."""
    last = replay.steps - math.ceil(job.deadline_hours / replay.step_hours)
    if last < 0:
        raise ValueError(f"the trace ({replay.steps * replay.step_hours:.0f} h) is shorter than the deadline")
    if count <= 1:
        return [0]
    return sorted({round(i * last / (count - 1)) for i in range(count)})


def replay_policy(
    policy: str,
    job: SimJob,
    replay: Replay,
    start: int,
    interval_hours: float | None = None,
    tick_hours: float | None = None,
    record: bool = False,
) -> RunResult:
    """Run one policy over the trace from ``start`` until the job finishes or the trace ends.

    Parameters
    ----------
    policy:
        A name in :data:`spotrun.model.deadline.policies.POLICIES`.
    job, replay:
        The job and the resampled trace.
    start:
        The step the job is submitted at.
    interval_hours:
        The checkpoint interval in force; None: the job's (``auto``: :func:`online_interval` at each launch).
    tick_hours:
        How stale the policy's decision may be (its knobs reserve it); the replay's step when None. The knobs
        are :func:`params_for`'s at each step, from the preemptions seen so far.
    record:
        Keep (time, work done) at every step, for the plot, and each change of decision.

    Returns
    -------
    RunResult
    """
    step = replay.step_hours
    tick = replay.step_hours if tick_hours is None else tick_hours
    restart = replayed_restart_hours(job, step)
    history = SpotHistory()

    def interval_now() -> float:
        return interval_hours if interval_hours is not None else online_interval(job, history).interval_hours

    interval = interval_now()  # the interval of the attempt running (or of the next one, while none runs)
    boot_steps = restart_steps(job, step)
    saved = unsaved = lost = bound = cost = spot_hours = od_hours = trained = 0.0
    uncovered = 0
    running, boot, launched = Running.NOTHING, 0, start
    result = RunResult(policy, start * step, 0.0, None, False, 0.0, 0, 0.0, 0.0)
    for t in range(start, replay.steps):
        elapsed = (t - start) * step
        if record:
            result.progress.append((elapsed, saved + unsaved))
        if running is Running.SPOT and not replay.spot[t]:
            if is_uncovered(t, job):
                lost, uncovered, unsaved = lost + unsaved, uncovered + 1, 0.0
                bound += interval / 2  # Young/Daly's expected loss, at this attempt's interval
            history = SpotHistory(
                history.spot_hours, history.preemptions + 1, history.silent + is_silent(t, job)
            )
            running, boot = Running.NOTHING, 0
        if running is Running.NOTHING:
            interval = interval_now()
        state = JobState(
            work_hours=job.work_hours,
            work_done_hours=saved + unsaved,
            elapsed_hours=elapsed,
            deadline_hours=job.deadline_hours,
            restart_hours=restart,
            checkpoint_hours=job.checkpoint_hours,
            checkpoint_interval_hours=interval,
            running=running,
            spot_available=replay.spot[t],
            spot_price=job.spot_price,
            on_demand_price=job.on_demand_price,
        )
        if policy == POLICY and job.estimate_after_hours is not None and trained < job.estimate_after_hours:
            decision = decide_without_estimate(
                state.time_left_hours,
                job.deadline_hours,
                spot_available=replay.spot[t],
                estimate_after_hours=job.estimate_after_hours,
            )
        else:
            exposed = exposed_hours(running, (t - launched) * step)
            decision = decide(policy, state, params_for(job, history, interval, tick, restart, exposed))
        choice = decision.choice
        if record and (not result.decisions or result.decisions[-1][1].choice is not choice):
            result.decisions.append((t - start, decision))
        wanted = {Choice.SPOT: Running.SPOT, Choice.ON_DEMAND: Running.ON_DEMAND}.get(choice, Running.NOTHING)
        if wanted is Running.SPOT and not replay.spot[t]:
            wanted = Running.NOTHING  # a launch into absent capacity fails: the step is spent waiting
        if wanted is not running:
            # A move saves first, as the control plane's does (its notice: checkpoint, commit, end; the save is
            # counted in the restart overhead): nothing unsaved crosses it. Then the next attempt launches
            # afresh, at the interval the control plane would give it now.
            saved, unsaved = saved + unsaved, 0.0
            running, boot, launched = wanted, boot_steps, t
            interval = interval_now()
        if running is Running.NOTHING:
            continue
        price = job.spot_price if running is Running.SPOT else job.on_demand_price
        fraction = 1.0
        if boot > 0:
            boot -= 1
        else:
            trained += step  # training time, saves included, as the control plane counts TRAINING
            gain = step * run_rate(job.checkpoint_hours, interval)
            remaining = job.work_hours - saved - unsaved
            if gain >= remaining - 1e-12:
                fraction = remaining / gain if gain > 0 else 1.0
                unsaved += remaining
            else:
                unsaved += gain
            if unsaved >= interval:
                whole = math.floor(unsaved / interval) * interval
                saved, unsaved = saved + whole, unsaved - whole
        cost += price * step * fraction
        if running is Running.SPOT:
            spot_hours += step * fraction
            history = SpotHistory(history.spot_hours + step * fraction, history.preemptions, history.silent)
        else:
            od_hours += step * fraction
        if saved + unsaved >= job.work_hours - 1e-9:
            result.completion_hours = elapsed + step * fraction
            result.deadline_met = result.completion_hours <= job.deadline_hours + 1e-9
            if record:
                result.progress.append((result.completion_hours, job.work_hours))
            break
    result.cost, result.work_lost_hours, result.uncovered_failures = cost, lost, uncovered
    result.spot_hours, result.on_demand_hours = spot_hours, od_hours
    result.lost_work_bound_hours = bound
    return result

"""Finish by a deadline at the lowest cost: the job's live state, the knobs, and the slack a decision rests on.

Pure. The control plane calls :func:`spotrun.model.deadline.policies.decide` at each acquisition and while the
job runs (with the job's state as it knows it); the simulator (:mod:`spotrun.model.simulation.replay`) calls the very
same function at every tick of a replayed trace, so what the bench measures is what the control plane runs.

Every policy returns a :class:`Decision`: the choice AND the slack it was based on, both for the timeline.

*Slack* is the time the job can still afford to lose: the time left to the deadline minus what an on-demand
finish from now would take (the work left, plus the restart overhead of moving onto on-demand when it is not
already there). A slack below zero means even on-demand cannot make it any more.

The policies that decide from it are in :mod:`spotrun.model.deadline.policies`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spotrun.model.capacity.candidates import Lifecycle


class Choice(enum.StrEnum):
    """What to run now."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"
    WAIT = "wait"  # run nothing: spot is not obtainable and the slack allows waiting for it


class Running(enum.StrEnum):
    """What the job runs on at the moment of the decision."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"
    NOTHING = "nothing"


@dataclass(frozen=True)
class JobState:
    """The job as the control plane knows it at one moment. All durations in hours.

    Attributes
    ----------
    work_hours, work_done_hours:
        The whole job's work, and the part of it done and safe (in a checkpoint, or savable within the notice).
    elapsed_hours, deadline_hours:
        Time since submission, and the deadline as hours after submission.
    restart_hours:
        The changeover overhead: launching an instance and restoring the checkpoint, before training resumes.
    checkpoint_hours, checkpoint_interval_hours:
        How long one save takes and how much training runs between saves: training advances only
        ``interval / (interval + checkpoint)`` of wall time.
    running:
        What the job runs on now.
    spot_available:
        Whether spot capacity is obtainable now (the instance is alive, or a launch would succeed).
    spot_price, on_demand_price:
        Per instance-hour; a spot price at or above on-demand's makes spot pointless.
    """

    work_hours: float
    work_done_hours: float
    elapsed_hours: float
    deadline_hours: float
    restart_hours: float
    checkpoint_hours: float
    checkpoint_interval_hours: float
    running: Running
    spot_available: bool
    spot_price: float
    on_demand_price: float

    @property
    def work_left_hours(self) -> float:
        return max(0.0, self.work_hours - self.work_done_hours)

    @property
    def time_left_hours(self) -> float:
        return self.deadline_hours - self.elapsed_hours


@dataclass(frozen=True)
class Decision:
    """A policy's answer: what to run, the slack it was based on (hours), and why, for the timeline."""

    choice: Choice
    slack_hours: float
    reason: str

    def lifecycle(self) -> Lifecycle:
        """The capacity this decision buys: ``spot`` or ``on-demand``; a ``wait`` buys none, so it is refused."""
        if self.choice is Choice.WAIT:
            raise ValueError("a decision to wait for spot launches nothing")
        return "on-demand" if self.choice is Choice.ON_DEMAND else "spot"


@dataclass(frozen=True)
class PolicyParams:
    """The policies' knobs, in hours. Defaults come from the job (see :func:`default_params`).

    Attributes
    ----------
    safety_hours:
        The slack kept in reserve for what the decision cannot see before the next one: the work a preemption
        could lose by then and the time until the next decision. Greedy, Uniform Progress and spotrun go
        on-demand at this slack (see :func:`default_params` for what a preemption can lose).
    hysteresis_hours:
        Uniform Progress: how far ahead of the line the job must be before leaving on-demand for spot.
    reserve_per_work_hour:
        spotrun: the slack each hour of work left is expected to consume in forced changeovers (a preemption
        costs a move to on-demand and a return to spot, plus the unsaved work a silent one loses). spotrun stops
        waiting for spot once the slack falls to ``safety + work left x this``, so that it can still afford
        to return to spot for the rest of the job instead of ending it on on-demand as greedy does.
    spot_mtbf_hours, loss_per_preemption_hours:
        spotrun: the pool's mean spot time between preemptions, and the work a preemption is expected to lose;
        together they say whether a stint on spot between two on-demand stretches pays for its changeovers
        (:func:`spot_stint_pays`).
    """

    safety_hours: float
    hysteresis_hours: float
    reserve_per_work_hour: float = 0.0
    spot_mtbf_hours: float = float("inf")
    loss_per_preemption_hours: float = 0.0
    interval_safety_hours: float | None = None

    @property
    def reserve_safety_hours(self) -> float:
        """The margin with a whole interval unsaved: what a job waiting for spot will face once on it (the wait
        reserve keeps it); ``safety_hours`` when not set."""
        return self.safety_hours if self.interval_safety_hours is None else self.interval_safety_hours


def default_params(
    restart_hours: float,
    checkpoint_hours: float,
    checkpoint_interval_hours: float,
    tick_hours: float,
    spot_mtbf_hours: float = float("inf"),
    uncovered_fraction: float = 1.0,
    exposed_hours: float = float("inf"),
) -> PolicyParams:
    """The knobs derived from the job: reserve what a preemption can lose, and a tick.

    Parameters
    ----------
    restart_hours, checkpoint_hours, checkpoint_interval_hours:
        The job's changeover overhead, save duration and interval.
    tick_hours:
        How often the decision is taken (the simulator's step, or the control plane's polling period).
    spot_mtbf_hours:
        The pool's mean spot time between preemptions (``inf``: none expected).
    uncovered_fraction:
        The share of preemptions that lose the unsaved work (see :mod:`spotrun.model.checkpoint_interval`).
    exposed_hours:
        The wall time the job has run on spot since its last sure save (:func:`exposed_hours`): 0 when it
        does not run on spot (a move onto spot saves first, and a launch restores the last checkpoint); ``inf``
        when not known (a whole interval is then assumed unsaved).

    Returns
    -------
    PolicyParams
        ``safety`` = min(interval + checkpoint, exposed + tick) + tick: a silent preemption before the next
        decision loses the work trained since the last save, which is at most one interval (``interval +
        checkpoint`` of wall time at the run rate) and at most what the job trained on spot by then (``exposed
        + tick``); the decision sees it up to a tick late. A job that just moved onto spot has nothing to lose:
        a whole interval at every decision (4.35 h with a 1-minute save, the 4-hour cap and 20-minute ticks)
        would refuse every return to spot that a shorter slack pays for. The restart onto on-demand that
        follows is not in it: the slack of a job not on on-demand already counts that restart
        (:func:`on_demand_finish_hours`), and counting it twice bought on-demand hours for nothing. The wait
        reserve keeps the whole interval's margin (``interval_safety_hours``): once on spot, the job faces it.
        Hysteresis = two restarts (the changeovers a return trip costs); the reserve per work hour = (two
        restarts + the expected loss of half an interval) per preemption, at the pool's preemption rate.
    """
    loss = uncovered_fraction * checkpoint_interval_hours / 2
    interval_wall = checkpoint_interval_hours + checkpoint_hours
    return PolicyParams(
        safety_hours=min(interval_wall, exposed_hours + tick_hours) + tick_hours,
        interval_safety_hours=interval_wall + tick_hours,
        hysteresis_hours=2 * restart_hours,
        reserve_per_work_hour=(2 * restart_hours + tick_hours + loss) / spot_mtbf_hours,
        spot_mtbf_hours=spot_mtbf_hours,
        loss_per_preemption_hours=loss,
    )


def exposed_hours(running: Running, attempt_hours: float) -> float:
    """The wall time a preemption could take the work of: the time on spot since the attempt began, else 0.

    An attempt begins from a checkpoint (a launch restores it; a move between spot and on-demand saves first),
    so the work a preemption loses is at most what the attempt trained (its boot included: an upper bound the
    control plane and the simulator both know). A job on on-demand or waiting has nothing on spot to lose.

    Parameters
    ----------
    running
        What the job runs on now.
    attempt_hours
        The time since the current attempt began.

    Returns
    -------
    float
        ``attempt_hours`` on spot, else 0.
    """
    return max(0.0, attempt_hours) if running is Running.SPOT else 0.0


def run_rate(checkpoint_hours: float, checkpoint_interval_hours: float) -> float:
    """The fraction of running time that advances training: saves stop it for ``checkpoint_hours``."""
    return checkpoint_interval_hours / (checkpoint_interval_hours + checkpoint_hours)


def on_demand_finish_hours(state: JobState) -> float:
    """Wall time an on-demand finish from now takes: a changeover unless on on-demand already, then the work."""
    changeover = 0.0 if state.running is Running.ON_DEMAND else state.restart_hours
    return changeover + state.work_left_hours / run_rate(
        state.checkpoint_hours, state.checkpoint_interval_hours
    )


def slack_hours(state: JobState) -> float:
    """Time left to the deadline minus an on-demand finish from now (:func:`on_demand_finish_hours`)."""
    return state.time_left_hours - on_demand_finish_hours(state)


def deadline_feasible(
    work_hours: float,
    deadline_hours: float,
    restart_hours: float,
    checkpoint_hours: float,
    checkpoint_interval_hours: float,
) -> tuple[bool, float]:
    """Whether even on-demand can meet the deadline, at submission (nothing done, nothing running).

    Parameters
    ----------
    work_hours, deadline_hours:
        The job's work and its deadline as hours after submission.
    restart_hours, checkpoint_hours, checkpoint_interval_hours:
        Its changeover overhead and checkpoint cadence.

    Returns
    -------
    tuple[bool, float]
        Feasible, and the slack at submission (negative when refused): a submission refuses the job when the
        first is false, naming the second.
    """
    slack = (
        deadline_hours - restart_hours - work_hours / run_rate(checkpoint_hours, checkpoint_interval_hours)
    )
    return slack >= 0, slack

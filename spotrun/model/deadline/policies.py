"""The deadline policies: each decides spot, wait or on-demand from a job's live state (:mod:`.deadline`).

The policies (names as ``spotrun simulate`` prints them):

- ``on-demand``: on-demand only; the cost ceiling and the deadline guarantee.
- ``spot-only``: spot whenever it is obtainable, wait (relaunch, in the next zone when there are several) when
  it is not, never on-demand; what SkyPilot managed jobs do. Cheap and blind to the deadline.
- ``greedy``: spot (or wait) until the slack is gone, then on-demand for the rest.
- ``uniform-progress``: "Can't Be Late" (Wu et al., NSDI'24): stay on spot while the job's progress
  is ahead of the straight line from (start, 0) to (deadline, work); when behind, on-demand; once on on-demand,
  back to spot only when ahead of the line by a hysteresis margin (the paper's guard against thrashing between
  the two at the line), and always on-demand when the slack falls to the changeover delay (the paper's safety
  net, the same rule greedy applies).
- ``spotrun``: spot whenever it is obtainable and the slack covers what a preemption can cost; wait while spot is
  gone and the slack still covers that; on-demand only when it must; back from on-demand to spot when the slack
  pays for two changeovers (onto spot, and back again should spot vanish) plus the same margin. The line of
  Uniform Progress is not used: on the replayed traces, moving to on-demand merely for being behind the line
  buys on-demand hours the slack did not need (see docs/guides/deadlines.md and bench/results/README.md).
"""

from __future__ import annotations

from collections.abc import Callable

from spotrun.model.deadline.state import Choice, Decision, JobState, PolicyParams, Running, slack_hours


def _spot_pays(state: JobState) -> bool:
    return state.spot_price < state.on_demand_price


def on_demand_only(state: JobState, params: PolicyParams) -> Decision:
    """On-demand, always."""
    return Decision(Choice.ON_DEMAND, slack_hours(state), "on-demand only")


def spot_only(state: JobState, params: PolicyParams) -> Decision:
    """Spot whenever obtainable, else wait for it; never on-demand, whatever the deadline."""
    slack = slack_hours(state)
    if state.spot_available:
        return Decision(Choice.SPOT, slack, "spot only: spot obtainable")
    return Decision(Choice.WAIT, slack, "spot only: waiting for spot capacity")


def greedy(state: JobState, params: PolicyParams) -> Decision:
    """Spot (or wait for it) until the slack falls to the safety margin, then on-demand to the end."""
    slack = slack_hours(state)
    if state.running is Running.ON_DEMAND:
        return Decision(Choice.ON_DEMAND, slack, "greedy: on on-demand for the rest")
    if slack <= params.safety_hours or not _spot_pays(state):
        return Decision(Choice.ON_DEMAND, slack, "greedy: slack used up")
    if state.spot_available:
        return Decision(Choice.SPOT, slack, "greedy: slack left, spot obtainable")
    return Decision(Choice.WAIT, slack, "greedy: slack left, waiting for spot")


def progress_line_hours(state: JobState) -> float:
    """Uniform Progress's line: the work a job progressing uniformly from start to deadline has done by now."""
    return state.work_hours * min(1.0, state.elapsed_hours / state.deadline_hours)


def uniform_progress(state: JobState, params: PolicyParams) -> Decision:
    """Can't Be Late's Uniform Progress, with its hysteresis and its safety net (see the module's docstring)."""
    slack = slack_hours(state)
    if slack <= params.safety_hours or not _spot_pays(state):
        return Decision(Choice.ON_DEMAND, slack, "uniform progress: safety net")
    ahead = state.work_done_hours - progress_line_hours(state)
    # Hysteresis: leaving on-demand costs a changeover; only a lead of more than that is worth the trip.
    needed = params.hysteresis_hours if state.running is Running.ON_DEMAND else 0.0
    if ahead < needed:
        return Decision(Choice.ON_DEMAND, slack, f"uniform progress: {ahead:.2f} h ahead of the line")
    if state.spot_available:
        return Decision(Choice.SPOT, slack, "uniform progress: ahead of the line, spot obtainable")
    return Decision(Choice.WAIT, slack, "uniform progress: ahead of the line, waiting for spot")


def stint_hours(params: PolicyParams, slack_on_spot_hours: float) -> float:
    """How long a spot stint begun now is expected to last, given the slack it will have once on spot.

    The pool's mean spot time between preemptions; but when that slack cannot hold a whole interval's loss
    (``params.reserve_safety_hours``), the margin, which grows with the time on spot (:func:`default_params`),
    moves the job off spot once what a preemption could take reaches the slack: the stint lasts at most the
    slack less the margin it starts with (``params.safety_hours``, nothing on spot yet).
    """
    if slack_on_spot_hours > params.reserve_safety_hours:
        return params.spot_mtbf_hours
    return min(params.spot_mtbf_hours, max(0.0, slack_on_spot_hours - params.safety_hours))


def spot_stint_pays(
    state: JobState, params: PolicyParams, stint: float | None = None, changeovers: int = 2
) -> bool:
    """Whether a spot stint of ``stint`` hours (the pool's mean when None) is cheaper than on-demand.

    A stint of length ``L`` bills ``L`` at the spot price and, when it ends, a restart back onto on-demand; it
    trains ``L`` less the restart onto spot, less the work a preemption loses. On-demand for the same training
    costs that at the on-demand price. The stint pays when
    ``L (on-demand - spot) > on-demand x (changeovers x restart + expected loss)``: two changeovers for a return
    from on-demand, one for a launch from nothing (the restart onto spot replaces the one onto on-demand). On a
    pool preempted every few minutes, or with the slack for a few minutes of spot, the trip costs more than it
    saves.
    """
    margin = state.on_demand_price - state.spot_price
    if margin <= 0:
        return False
    length = params.spot_mtbf_hours if stint is None else stint
    overhead = changeovers * state.restart_hours + params.loss_per_preemption_hours
    return length * margin > state.on_demand_price * overhead


def wait_reserve_hours(state: JobState, params: PolicyParams) -> float:
    """spotrun's reserve: the slack below which it stops waiting for spot and runs on on-demand.

    The safety margin with a whole interval unsaved (what the job faces once on spot); plus the two restarts of
    one return trip, so that the move to on-demand leaves the slack a return to spot needs (:func:`spotrun_policy`
    returns only while ``slack - 2 restarts`` is above the margin): without them, a job that waited down to the
    margin was on on-demand for good, like greedy, however much spot
    came back; plus the slack the rest of the work is expected to lose to preemptions at the pool's rate.
    """
    return (
        params.reserve_safety_hours
        + 2 * state.restart_hours
        + state.work_left_hours * params.reserve_per_work_hour
    )


def spotrun_policy(state: JobState, params: PolicyParams) -> Decision:
    """spotrun's policy: spend the slack on spot and on waiting, never below the reserve (module docstring)."""
    slack = slack_hours(state)
    if not _spot_pays(state):
        return Decision(Choice.ON_DEMAND, slack, "spotrun: spot costs as much as on-demand")
    if state.running is Running.ON_DEMAND:
        # Leaving on-demand costs a restart onto spot now and another back should spot vanish: the slack
        # after both must still hold the margin (a move saves first: nothing on spot to lose yet), and the stint
        # that slack allows must pay for both.
        room = slack - 2 * state.restart_hours
        if (
            state.spot_available
            and room > params.safety_hours
            and spot_stint_pays(state, params, stint_hours(params, room))
        ):
            return Decision(Choice.SPOT, slack, "spotrun: slack and price pay for a return to spot")
        return Decision(Choice.ON_DEMAND, slack, "spotrun: staying on on-demand")
    if slack <= params.safety_hours:
        return Decision(Choice.ON_DEMAND, slack, "spotrun: slack at the safety margin")
    if state.spot_available:
        if state.running is Running.NOTHING and not spot_stint_pays(
            state, params, stint_hours(params, slack - state.restart_hours), changeovers=1
        ):
            return Decision(Choice.ON_DEMAND, slack, "spotrun: the slack allows too short a stint on spot")
        return Decision(Choice.SPOT, slack, "spotrun: slack above the safety margin, spot obtainable")
    reserve = wait_reserve_hours(state, params)
    if slack <= reserve:
        return Decision(
            Choice.ON_DEMAND, slack, f"spotrun: no spot, slack within the {reserve:.2f} h reserve"
        )
    return Decision(Choice.WAIT, slack, "spotrun: no spot, slack above the reserve: waiting for it")


Policy = Callable[[JobState, PolicyParams], Decision]

POLICIES: dict[str, Policy] = {
    "on-demand": on_demand_only,
    "spot-only": spot_only,
    "greedy": greedy,
    "uniform-progress": uniform_progress,
    "spotrun": spotrun_policy,
}


def decide(policy: str, state: JobState, params: PolicyParams) -> Decision:
    """The one entry point the control plane and the simulator call.

    Parameters
    ----------
    policy:
        A name in :data:`POLICIES`.
    state:
        The job's live state.
    params:
        The knobs (:func:`default_params` for the job's).

    Returns
    -------
    Decision
        What to run now, the slack it was based on, and why.
    """
    try:
        chosen = POLICIES[policy]
    except KeyError:
        raise ValueError(f"unknown deadline policy {policy!r}; known: {', '.join(POLICIES)}") from None
    return chosen(state, params)

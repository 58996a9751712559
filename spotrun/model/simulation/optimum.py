"""The omniscient optimum: the cheapest schedule that meets the deadline, knowing the whole trace in advance.

Pure. Dynamic programming over steps x progress (the formulation of "Can't Be Late", NSDI'24: the
offline optimum over a known availability trace), under the job model of :mod:`spotrun.model.simulation.replay`:
the same steps, prices, restart overhead and checkpoint-amortised training rate. Knowing each preemption in
advance, the optimum saves just before it and loses no work: the limit every online policy is measured against.

State at a step: progress (whole productive steps done), and what runs (nothing; spot or on-demand with ``b``
restart steps still to go). The value is the least cost of reaching it. Progress is capped at the last
productive step: the one that finishes is billed for the fraction of it the work needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spotrun.model.deadline.state import run_rate
from spotrun.model.simulation.replay import Replay, SimJob, restart_steps

_INF = math.inf


@dataclass(frozen=True)
class Optimum:
    """The optimum's cost and completion (hours after the start); cost None when the deadline is unreachable."""

    cost: float | None
    completion_hours: float | None
    progress: tuple[tuple[float, float], ...] = ()  # (hours after start, work done), when asked for
    # What runs in each step from the start to the finishing one ("idle", "spot", "od"), when asked for: the
    # schedule the cost is that of, for a replay to check.
    schedule: tuple[str, ...] = ()


def _min(rows: list[list[float]]) -> list[float]:
    return list(map(min, *rows)) if len(rows) > 1 else list(rows[0])


def _plus(values: list[float], add: float) -> list[float]:
    return [v + add for v in values]


# A DP state after a step: (idle, spot rows, on-demand rows), each row a list over progress (INF: unreachable).
_State = tuple[list[float], list[list[float]], list[list[float]]]


@dataclass(frozen=True)
class _Setup:
    count: int  # productive steps the work needs, the last one maybe partial
    last_fraction: float  # the part of the last productive step the work needs
    boot: int  # restart steps
    steps: int  # steps the deadline allows from the start (the trace permitting)
    cs: float  # a step's price on spot
    co: float  # and on on-demand
    per_step: float  # work one productive step does


def _setup(job: SimJob, replay: Replay, start: int, interval_hours: float) -> _Setup:
    step = replay.step_hours
    per_step = step * run_rate(job.checkpoint_hours, interval_hours)
    needed = job.work_hours / per_step
    count = max(1, math.ceil(needed - 1e-9))
    last_fraction = needed - (count - 1)
    # The finishing step s (0-based after the start) completes at (s + last_fraction) steps: within the deadline.
    last_step = math.floor(job.deadline_hours / step - last_fraction + 1e-9)
    steps = min(last_step + 1, replay.steps - start)
    return _Setup(
        count,
        last_fraction,
        restart_steps(job, step),
        steps,
        job.spot_price * step,
        job.on_demand_price * step,
        per_step,
    )


def _advance(su: _Setup, state: _State, s: int, spot_open: bool) -> tuple[_State, float] | None:
    """Step ``s``: the states after it, and the least cost of finishing in it; None once nothing can finish."""
    # Only progress reachable by the end of this step (at most s + 1) and still able to finish in time matters:
    # a window about as wide as the slack, which is what keeps this fast. Progress leaving the window from below
    # could not finish any more.
    lo, hi = max(0, su.count - (su.steps - s)), min(su.count - 1, s + 1)
    if lo > hi:
        return None
    width, boot = hi - lo + 1, su.boot
    idle, spot, od = state
    cut = [row[lo : hi + 1] for row in (idle, *spot, *od)]
    w_idle, w_spot, w_od = cut[0], cut[1 : boot + 2], cut[boot + 2 :]
    finish = _INF
    new_rows: list[list[list[float]]] = []
    for rows, enter, price, open_ in (
        (w_spot, _min([w_idle, *w_od]), su.cs, spot_open),
        (w_od, _min([w_idle, *w_spot]), su.co, True),
    ):
        nxt = [[_INF] * width for _ in range(boot + 1)]
        if open_:
            # Entering spends this step on the restart, or trains at once when there is none.
            for b in range(1, boot + 1):
                nxt[b - 1] = _plus(rows[b], price)
            if boot > 0:
                nxt[boot - 1] = _min([nxt[boot - 1], _plus(enter, price)])
                training = rows[0]
            else:
                training = _min([rows[0], enter])
            # Training moves progress p to p + 1; from the last index, it finishes.
            moved = _plus(training, price)
            nxt[0] = _min([nxt[0], [_INF, *moved[:-1]]])
            if hi == su.count - 1:
                finish = min(finish, training[-1] + price * su.last_fraction)
        new_rows.append(nxt)
    pad_lo, pad_hi = [_INF] * lo, [_INF] * (su.count - 1 - hi)
    return (
        (
            pad_lo + _min(cut) + pad_hi,
            [pad_lo + row + pad_hi for row in new_rows[0]],
            [pad_lo + row + pad_hi for row in new_rows[1]],
        ),
        finish,
    )


def _initial(su: _Setup) -> _State:
    empty = [_INF] * su.count
    idle = [0.0, *[_INF] * (su.count - 1)]
    return idle, [list(empty) for _ in range(su.boot + 1)], [list(empty) for _ in range(su.boot + 1)]


def optimum(job: SimJob, replay: Replay, start: int, interval_hours: float, record: bool = False) -> Optimum:
    """The least cost of finishing by the deadline from ``start``, with the whole trace known.

    Parameters
    ----------
    job, replay:
        The job and the resampled trace (as :func:`spotrun.model.simulation.replay.replay_policy` takes them).
    start:
        The submission step.
    interval_hours:
        The checkpoint interval in force (it sets the training rate).
    record:
        Also trace back the schedule's progress, step by step, for the plot.

    Returns
    -------
    Optimum
    """
    su = _setup(job, replay, start, interval_hours)
    state = _initial(su)
    history = [state]
    best, best_at = _INF, -1
    for s in range(su.steps):
        advanced = _advance(su, state, s, replay.spot[start + s])
        if advanced is None:
            break
        state, finish = advanced
        if record:
            history.append(state)
        if finish < best:
            best, best_at = finish, s
    if best_at < 0:
        return Optimum(None, None)
    step = replay.step_hours
    completion = (best_at + su.last_fraction) * step
    progress: tuple[tuple[float, float], ...] = ()
    modes: list[str] = []
    if record:
        spot = [replay.spot[start + s] for s in range(su.steps)]
        path = _trace_back(su, history, best_at, best, spot, modes)
        progress = (*((k * step, p * su.per_step) for k, p in enumerate(path)), (completion, job.work_hours))
    return Optimum(best, completion, progress, tuple(modes))


def _close(a: float, b: float) -> bool:
    # An unreachable state (INF) matches nothing: INF's relative tolerance would be INF.
    return math.isfinite(a) and abs(a - b) <= 1e-9 * max(1.0, abs(a))


def _trace_back(
    su: _Setup, history: list[_State], last: int, cost: float, spot: list[bool], modes: list[str]
) -> list[int]:
    """The progress after each step of an optimal schedule, from the states of every step (``history[k]``: the
    states after step k - 1), finishing in step ``last`` at ``cost``: each state's predecessor is one whose cost
    plus the step's price (nothing when idle) gives the state's. ``modes`` receives what runs in each step."""

    def rows(k: int, mode: str) -> list[list[float]]:
        return history[k][1] if mode == "spot" else history[k][2]

    def entering(k: int, mode: str, p: int) -> list[tuple[str, int]]:
        # The states a move onto ``mode`` may come from: idle, or the other mode at any restart stage.
        other = "od" if mode == "spot" else "spot"
        return [("idle", 0), *((other, b) for b in range(su.boot + 1))]

    def value(k: int, mode: str, b: int, p: int) -> float:
        if p < 0:
            return _INF
        return history[k][0][p] if mode == "idle" else rows(k, mode)[b][p]

    # The finishing step trained from the last progress index, on spot or on-demand, or entered and trained.
    mode, b, p, v, finishing = "", 0, su.count - 1, 0.0, ""
    for m, price in (("spot", su.cs), ("od", su.co)):
        if m == "spot" and not spot[last]:
            continue
        want = cost - price * su.last_fraction
        starts = [(m, 0)] + (entering(last, m, p) if su.boot == 0 else [])
        hit = next(((mm, bb) for mm, bb in starts if _close(value(last, mm, bb, p), want)), None)
        if hit:
            mode, b, v, finishing = hit[0], hit[1], want, m
            break
    path, modes[:] = [p], [finishing]
    for k in range(last, 0, -1):  # from the states after step k - 1 to those after step k - 2
        modes.append(mode)  # what ran in step k - 1
        price = 0.0 if mode == "idle" else (su.cs if mode == "spot" else su.co)
        options: list[tuple[str, int, int]] = []
        if mode == "idle":
            options = [("idle", 0, p), *((m, bb, p) for m in ("spot", "od") for bb in range(su.boot + 1))]
        else:
            if b + 1 <= su.boot:
                options.append((mode, b + 1, p))
            if su.boot > 0 and b == su.boot - 1:
                options += [(m, bb, p) for m, bb in entering(k - 1, mode, p)]
            if b == 0:
                options.append((mode, 0, p - 1))
                if su.boot == 0:
                    options += [(m, bb, p - 1) for m, bb in entering(k - 1, mode, p)]
        want = v - price
        mode, b, p = next(o for o in options if _close(value(k - 1, *o), want))
        v = want
        path.append(p)
    path.reverse()
    modes.reverse()
    return path

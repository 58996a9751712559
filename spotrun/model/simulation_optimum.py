"""The omniscient optimum: the cheapest schedule that meets the deadline, knowing the whole trace in advance.

Pure. Dynamic programming over steps x progress (the formulation of "Can't Be Late", NSDI'24: the
offline optimum over a known availability trace), under the job model of :mod:`spotrun.model.simulation`:
the same steps, prices, restart overhead and checkpoint-amortised training rate. Knowing each preemption in
advance, the optimum saves just before it and loses no work: the limit every online policy is measured against.

State at a step: progress (whole productive steps done), and what runs (nothing; spot or on-demand with ``b``
restart steps still to go). The value is the least cost of reaching it. Progress is capped at the last
productive step: the one that finishes is billed for the fraction of it the work needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spotrun.model.deadline import run_rate
from spotrun.model.simulation import Replay, SimJob, restart_steps

_INF = math.inf


@dataclass(frozen=True)
class Optimum:
    """The optimum's cost and completion (hours after the start); cost None when the deadline is unreachable."""

    cost: float | None
    completion_hours: float | None


def _min(rows: list[list[float]]) -> list[float]:
    return list(map(min, *rows)) if len(rows) > 1 else list(rows[0])


def _plus(values: list[float], add: float) -> list[float]:
    return [v + add for v in values]


def optimum(job: SimJob, replay: Replay, start: int, interval_hours: float) -> Optimum:
    """The least cost of finishing by the deadline from ``start``, with the whole trace known.

    Parameters
    ----------
    job, replay:
        The job and the resampled trace (as :func:`spotrun.model.simulation.replay_policy` takes them).
    start:
        The submission step.
    interval_hours:
        The checkpoint interval in force (it sets the training rate).

    Returns
    -------
    Optimum
    """
    step = replay.step_hours
    per_step = step * run_rate(job.checkpoint_hours, interval_hours)
    needed = job.work_hours / per_step  # productive steps, the last one maybe partial
    count = max(1, math.ceil(needed - 1e-9))
    last_fraction = needed - (count - 1)
    boot = restart_steps(job, step)
    # The finishing step s (0-based after the start) completes at (s + last_fraction) steps: within the deadline.
    last_step = math.floor(job.deadline_hours / step - last_fraction + 1e-9)
    cs, co = job.spot_price * step, job.on_demand_price * step
    empty = [_INF] * count
    idle = [0.0, *[_INF] * (count - 1)]
    # spot[b] / od[b]: running, b restart steps left before training resumes (b = 0: training).
    spot = [list(empty) for _ in range(boot + 1)]
    od = [list(empty) for _ in range(boot + 1)]
    best, best_at = _INF, None
    steps = min(last_step + 1, replay.steps - start)
    for s in range(steps):
        # Only progress reachable by the end of this step (at most s + 1) and still able to finish in time
        # matters: a window about as wide as the slack, which is what keeps this fast. Progress leaving the
        # window from below could not finish any more.
        lo, hi = max(0, count - (steps - s)), min(count - 1, s + 1)
        if lo > hi:
            break
        width = hi - lo + 1
        cut = [row[lo : hi + 1] for row in (idle, *spot, *od)]
        w_idle, w_spot, w_od = cut[0], cut[1 : boot + 2], cut[boot + 2 :]
        new_idle = _min(cut)
        finish = _INF
        new_rows: list[list[list[float]]] = []
        for rows, enter, price, open_ in (
            (w_spot, _min([w_idle, *w_od]), cs, replay.spot[start + s]),
            (w_od, _min([w_idle, *w_spot]), co, True),
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
                if hi == count - 1:
                    finish = min(finish, training[-1] + price * last_fraction)
            new_rows.append(nxt)
        pad_lo, pad_hi = [_INF] * lo, [_INF] * (count - 1 - hi)
        idle = pad_lo + new_idle + pad_hi
        spot = [pad_lo + row + pad_hi for row in new_rows[0]]
        od = [pad_lo + row + pad_hi for row in new_rows[1]]
        if finish < best:
            best, best_at = finish, (s + last_fraction) * step
    if best_at is None:
        return Optimum(None, None)
    return Optimum(best, best_at)

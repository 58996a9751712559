"""Many start times across a trace, every policy and the optimum from each: the per-policy summary.

Pure. ``spotrun simulate`` and the bench both report what :func:`simulate_trace` returns.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from spotrun.model.checkpoint_interval import IntervalChoice
from spotrun.model.deadline.policies import POLICIES
from spotrun.model.simulation.optimum import optimum
from spotrun.model.simulation.replay import (
    Replay,
    RunResult,
    SimJob,
    interval_for,
    optimum_interval,
    replay_policy,
    start_steps,
)
from spotrun.model.simulation.traces import Trace

OPTIMUM = "optimum"


@dataclass(frozen=True)
class PolicySummary:
    """One policy over every start of one trace. Costs are means per run; work lost is the total."""

    policy: str
    runs: int
    mean_cost: float
    savings_vs_on_demand: float  # fraction of the on-demand-only mean cost saved
    cost_ratio_to_optimum: float | None  # mean cost over the optimum's mean cost (same starts)
    mean_completion_hours: float | None  # over the runs that finished
    deadlines_met: int
    work_lost_hours: float
    uncovered_failures: int
    lost_work_bound_hours: (
        float  # Young/Daly's expectation for those failures, each at its attempt's interval
    )


@dataclass(frozen=True)
class TraceReport:
    """One trace's simulation: the inputs that matter and one summary per policy (the optimum last).

    ``interval``: the one a job starts with (with ``auto``, each attempt's follows the preemptions seen so far).
    """

    trace: str
    kind: str
    step_hours: float
    starts: int
    interval: IntervalChoice
    summaries: tuple[PolicySummary, ...]

    def summary(self, policy: str) -> PolicySummary:
        return next(s for s in self.summaries if s.policy == policy)

    def as_dict(self) -> dict[str, object]:
        return {
            "trace": self.trace,
            "kind": self.kind,
            "step_hours": self.step_hours,
            "starts": self.starts,
            "interval": {**asdict(self.interval), "why": self.interval.why},
            "policies": [asdict(s) for s in self.summaries],
        }


def replay_of(trace: Trace, step_seconds: int) -> Replay:
    """The trace resampled to the simulator's step (see :meth:`spotrun.model.simulation.traces.Trace.steps`)."""
    seconds, flags = trace.steps(step_seconds)
    return Replay(seconds / 3600, flags)


def _summarise(policy: str, runs: list[RunResult], od_mean: float, opt_mean: float | None) -> PolicySummary:
    n = len(runs)
    mean_cost = sum(r.cost for r in runs) / n
    finished = [r.completion_hours for r in runs if r.completion_hours is not None]
    failures = sum(r.uncovered_failures for r in runs)
    return PolicySummary(
        policy=policy,
        runs=n,
        mean_cost=mean_cost,
        savings_vs_on_demand=1 - mean_cost / od_mean if od_mean else 0.0,
        cost_ratio_to_optimum=mean_cost / opt_mean if opt_mean else None,
        mean_completion_hours=sum(finished) / len(finished) if finished else None,
        deadlines_met=sum(r.deadline_met for r in runs),
        work_lost_hours=sum(r.work_lost_hours for r in runs),
        uncovered_failures=failures,
        lost_work_bound_hours=sum(r.lost_work_bound_hours for r in runs),
    )


def simulate_trace(trace: Trace, job: SimJob, starts: int, step_seconds: int) -> TraceReport:
    """Every policy of :data:`~spotrun.model.deadline.policies.POLICIES` and the optimum from ``starts`` start times.

    Parameters
    ----------
    trace:
        The trace replayed.
    job:
        The job.
    starts:
        How many start times, spread evenly over the trace (each leaves the whole deadline inside it).
    step_seconds:
        The decision step (rounded to whole trace ticks).

    Returns
    -------
    TraceReport
    """
    replay = replay_of(trace, step_seconds)
    interval = interval_for(job, replay)
    begins = start_steps(replay, job, starts)
    runs = {name: [replay_policy(name, job, replay, b) for b in begins] for name in POLICIES}
    best = [optimum(job, replay, b, optimum_interval(job)) for b in begins]
    od_mean = sum(r.cost for r in runs["on-demand"]) / len(begins)
    costs = [o.cost for o in best]
    opt_mean = None if any(c is None for c in costs) else sum(c for c in costs if c is not None) / len(costs)
    summaries = [_summarise(name, rs, od_mean, opt_mean) for name, rs in runs.items()]
    finished = [o.completion_hours for o in best if o.completion_hours is not None]
    summaries.append(
        PolicySummary(
            policy=OPTIMUM,
            runs=len(begins),
            mean_cost=opt_mean if opt_mean is not None else float("nan"),
            savings_vs_on_demand=1 - opt_mean / od_mean if opt_mean is not None and od_mean else 0.0,
            cost_ratio_to_optimum=1.0 if opt_mean else None,
            mean_completion_hours=sum(finished) / len(finished) if finished else None,
            deadlines_met=sum(o.cost is not None for o in best),
            work_lost_hours=0.0,
            uncovered_failures=0,
            lost_work_bound_hours=0.0,
        )
    )
    return TraceReport(
        trace.name, trace.kind.value, replay.step_hours, len(begins), interval, tuple(summaries)
    )


@dataclass(frozen=True)
class Overall:
    """One policy over every trace: costs summed over runs, ratios of those sums."""

    policy: str
    runs: int
    total_cost: float
    cost_ratio_to_optimum: float | None
    savings_vs_on_demand: float
    deadlines_met: int
    work_lost_hours: float
    lost_work_bound_hours: float


def overall(reports: list[TraceReport]) -> list[Overall]:
    """Each policy's totals over ``reports`` (the optimum's ratio is 1; None when it has an unreachable run)."""
    names = [s.policy for s in reports[0].summaries]
    total = {n: sum(r.summary(n).mean_cost * r.summary(n).runs for r in reports) for n in names}
    od, opt = total["on-demand"], total[OPTIMUM]
    return [
        Overall(
            policy=n,
            runs=sum(r.summary(n).runs for r in reports),
            total_cost=total[n],
            cost_ratio_to_optimum=total[n] / opt if opt == opt and opt > 0 else None,  # opt != opt: NaN
            savings_vs_on_demand=1 - total[n] / od if od else 0.0,
            deadlines_met=sum(r.summary(n).deadlines_met for r in reports),
            work_lost_hours=sum(r.summary(n).work_lost_hours for r in reports),
            lost_work_bound_hours=sum(r.summary(n).lost_work_bound_hours for r in reports),
        )
        for n in names
    ]

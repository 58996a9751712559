"""The deadline bench: every policy and the optimum over every shared spot trace, 50 start times each.

A section of ``make bench`` (``bench/results/simulate.json``, and ``README.md`` there). The table's header line
states, measured, what issue 13 asks: spotrun's policy meets every deadline the optimum meets, costs no more
than Uniform Progress on any trace, its cost as a ratio to the optimum (the aim: within 1.10x), and the
``auto`` interval's lost work against the Young/Daly expectation (the aim: within 1.10x).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.common import git_state
from spotrun.model.simulation.replay import SimJob
from spotrun.model.simulation.runs import OPTIMUM, TraceReport, overall, simulate_trace
from spotrun.model.simulation.traces import load_traces

REPO = Path(__file__).resolve().parents[1]
AIM = 1.10


@dataclass(frozen=True)
class SimulateConfig:
    """The job replayed (hours, USD per hour) and the replay's resolution.

    The prices are p3.2xlarge's in us-east-1 (on-demand list, spot about 30 %); the deadline leaves half the work
    again as slack; the restart is a launch and a restore.
    """

    label: str
    checkpoint_hours: float
    work_hours: float = 24.0
    deadline_hours: float = 36.0
    restart_hours: float = 20 / 60
    silent_fraction: float = 0.05
    spot_price: float = 0.918
    on_demand_price: float = 3.06
    starts: int = 50
    step_seconds: int = 1200


# Two jobs: one whose save fits in the 2-minute notice (only silent deaths lose work, so `auto` picks a long
# interval), one whose save does not (every preemption loses the work since the last save).
CONFIGS = (
    SimulateConfig("save fits the notice (1 min)", checkpoint_hours=1 / 60),
    SimulateConfig("save outlasts the notice (5 min)", checkpoint_hours=5 / 60),
)


def find_traces(start: Path = REPO) -> Path:
    """The shared traces: ``shared/traces`` beside the repository, or beside a folder above it (a worktree)."""
    for folder in (start, *start.parents):
        candidate = folder.parent / "shared" / "traces"
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"no shared/traces beside {start} or any folder above it")


def _verdicts(reports: list[TraceReport]) -> dict[str, object]:
    spot = {r.trace: r.summary("spotrun") for r in reports}
    ratios = [s.cost_ratio_to_optimum for s in spot.values() if s.cost_ratio_to_optimum is not None]
    totals = {o.policy: o for o in overall(reports)}
    lost, bound = totals["spotrun"].work_lost_hours, totals["spotrun"].lost_work_bound_hours
    return {
        "meets_every_deadline_the_optimum_meets": all(
            spot[r.trace].deadlines_met >= r.summary(OPTIMUM).deadlines_met for r in reports
        ),
        "never_costs_more_than_uniform_progress": all(
            spot[r.trace].mean_cost <= r.summary("uniform-progress").mean_cost for r in reports
        ),
        "cost_ratio_to_optimum_overall": totals["spotrun"].cost_ratio_to_optimum,
        "cost_ratio_to_optimum_worst_trace": max(ratios) if ratios else None,
        "auto_lost_work_over_young_daly": lost / bound if bound else None,
    }


def measure(config: SimulateConfig, traces: Path | None = None) -> dict[str, object]:
    """Run the simulator over every trace under ``traces`` (:func:`find_traces` when None), as JSON-ready data."""
    traces = traces or find_traces()
    job = SimJob(
        work_hours=config.work_hours,
        deadline_hours=config.deadline_hours,
        restart_hours=config.restart_hours,
        checkpoint_hours=config.checkpoint_hours,
        silent_fraction=config.silent_fraction,
        spot_price=config.spot_price,
        on_demand_price=config.on_demand_price,
    )
    began = time.perf_counter()
    reports = [simulate_trace(t, job, config.starts, config.step_seconds) for t in load_traces(traces)]
    return {
        "config": asdict(config),
        "seconds": round(time.perf_counter() - began, 1),
        "verdicts": _verdicts(reports),
        "overall": [asdict(o) for o in overall(reports)],
        "traces": [r.as_dict() for r in reports],
    }


def _yes(flag: object) -> str:
    return "yes" if flag else "NO"


def table(result: dict[str, object], commit: str) -> list[str]:
    """One job's markdown: the header line of verdicts, then one row per trace and policy."""
    v = result["verdicts"]
    assert isinstance(v, dict)
    ratio, worst, lost = (
        v["cost_ratio_to_optimum_overall"],
        v["cost_ratio_to_optimum_worst_trace"],
        v["auto_lost_work_over_young_daly"],
    )
    config = result["config"]
    assert isinstance(config, dict)
    lines = [
        f"**{config['label']}.** spotrun's policy meets every deadline the optimum meets: "
        f"{_yes(v['meets_every_deadline_the_optimum_meets'])}; "
        f"costs no more than Uniform Progress on any trace: {_yes(v['never_costs_more_than_uniform_progress'])}; "
        f"cost {ratio:.2f}x the optimum overall, {worst:.2f}x on the worst trace "
        f"(aim {AIM:.2f}x: {_yes(worst <= AIM)}); `auto` interval lost {lost:.2f}x the Young/Daly expectation "
        f"(aim {AIM:.2f}x: {_yes(lost <= AIM)}).",
        "",
        f"Job: {config['work_hours']:g} h of work, deadline {config['deadline_hours']:g} h, restart "
        f"{config['restart_hours'] * 60:.0f} min, checkpoint {config['checkpoint_hours'] * 60:.0f} min, spot "
        f"${config['spot_price']}/h, on-demand ${config['on_demand_price']}/h; {config['starts']} start times per "
        f"trace, {config['step_seconds'] / 60:.0f}-minute steps, "
        f"{config['silent_fraction']:.0%} of preemptions silent; "
        f"commit {commit}, {result['seconds']} s.",
        "",
        "| trace | interval (h) | policy | mean cost ($) | saves vs on-demand | x optimum | deadlines met "
        "| work lost (h) | Young/Daly bound (h) |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    traces = result["traces"]
    assert isinstance(traces, list)
    for trace in traces:
        for i, p in enumerate(trace["policies"]):
            ratio_text = (
                f"{p['cost_ratio_to_optimum']:.2f}" if p["cost_ratio_to_optimum"] is not None else "-"
            )
            interval = f"{trace['interval']['interval_hours']:.2f}" if i == 0 else ""
            lines.append(
                f"| {trace['trace'] if i == 0 else ''} | {interval}"
                f" | {p['policy']} | {p['mean_cost']:.2f} | {p['savings_vs_on_demand']:.0%} | {ratio_text} "
                f"| {p['deadlines_met']}/{p['runs']} | {p['work_lost_hours']:.1f} | {p['lost_work_bound_hours']:.1f} |"
            )
    return lines


def run(runs: int = 1) -> dict[str, object]:
    """The section of ``make bench``: every job of :data:`CONFIGS` (deterministic, so ``runs`` is not used)."""
    commit, dirty = git_state()
    jobs = [measure(config) for config in CONFIGS]
    lines = [line for job in jobs for line in [*table(job, commit + ("+dirty" if dirty else "")), ""]]
    return {
        "name": "simulate",
        "title": "Deadline policies over the shared spot traces (issue 13)",
        "markdown": "\n".join(lines),
        "results": {"benchmark": "deadline policies over the shared spot traces (issue 13)", "jobs": jobs},
    }


if __name__ == "__main__":
    print(run()["markdown"])

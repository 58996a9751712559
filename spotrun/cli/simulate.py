"""``spotrun simulate``: replay spot traces for a job under each deadline policy, side by side.

The job comes from flags, or from a manifest's ``capacity.deadline`` and ``training.expected_hours`` once the
manifest has them (flags win). The numbers are :mod:`spotrun.model.simulation.runs`'s; this module only reads
the inputs and prints.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from spotrun.cli.display.output import JsonOpt, console, emit_json, fail
from spotrun.model.deadline.state import deadline_feasible, run_rate
from spotrun.model.deadline.work import ESTIMATE_AFTER_HOURS
from spotrun.model.manifest.deadline import deadline_hours as hours_after
from spotrun.model.manifest.parse import ManifestError, parse_manifest_text
from spotrun.model.simulation.replay import SimJob
from spotrun.model.simulation.runs import OPTIMUM, TraceReport, overall, simulate_trace
from spotrun.model.simulation.traces import TraceError, load_traces

# p3.2xlarge in us-east-1, USD per hour: the on-demand list price and a typical spot price (about 30 %).
DEFAULT_ON_DEMAND_PRICE = 3.06
DEFAULT_SPOT_PRICE = 0.918


def _from_manifest(path: Path) -> tuple[float | None, float | None, str, bool]:
    """(work hours, deadline hours after now, what to give when one is missing, work in steps) from a manifest.

    A manifest whose work is in steps (``training.total_steps``) has no hours until the job runs: it is refused
    unless ``--work-hours`` is given, never read as no work; given, spotrun's policy is replayed as it decides
    for such a job, without an estimate until the job has trained long enough for one.
    """
    try:
        manifest = parse_manifest_text(path.read_bytes())
    except (OSError, ManifestError) as exc:
        raise fail(f"{path}: {exc}", code=2) from None
    work, deadline = manifest.training.expected_hours, manifest.capacity.deadline
    missing = "give --work-hours and --deadline-hours (or a manifest that has them)"
    if work is None and manifest.training.total_steps is not None:
        missing = (
            f"{path}: its work is in steps (training.total_steps), learnt only while the job runs: give "
            "--work-hours"
        )
    hours = hours_after(deadline, datetime.now(UTC)) if deadline is not None else None
    return work, hours, missing, work is None and manifest.training.total_steps is not None


def _job(
    work_hours: float,
    deadline_hours: float,
    checkpoint_minutes: float,
    restart_minutes: float,
    spot_price: float,
    on_demand_price: float,
    interval_minutes: float | None,
    silent_fraction: float,
    in_steps: bool = False,
) -> SimJob:
    interval = interval_minutes / 60 if interval_minutes is not None else None
    job = SimJob(
        work_hours=work_hours,
        deadline_hours=deadline_hours,
        restart_hours=restart_minutes / 60,
        checkpoint_hours=checkpoint_minutes / 60,
        spot_price=spot_price,
        on_demand_price=on_demand_price,
        checkpoint_interval_hours=interval,
        silent_fraction=silent_fraction,
        estimate_after_hours=ESTIMATE_AFTER_HOURS if in_steps else None,
    )
    # Refused as at submission: the slack with the longest interval the auto choice can take is the best case.
    ok, slack = deadline_feasible(
        job.work_hours,
        job.deadline_hours,
        job.restart_hours,
        job.checkpoint_hours,
        interval if interval is not None else job.max_interval_hours,
    )
    if not ok:
        raise fail(
            f"even on-demand cannot meet a {deadline_hours:g} h deadline for {work_hours:g} h of work "
            f"(short by {-slack:.2f} h)",
            code=2,
        )
    return job


def _table(reports: list[TraceReport]) -> Table:
    table = Table(title="Deadline policies over the traces (per trace: mean over its start times)")
    for name, justify in (
        ("trace", "left"),
        ("policy", "left"),
        ("cost $", "right"),
        ("saves", "right"),
        ("x optimum", "right"),
        ("done (h)", "right"),
        ("deadlines met", "right"),
        ("work lost (h)", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for report in reports:
        for i, s in enumerate(report.summaries):
            table.add_row(
                f"{report.kind}: {Path(report.trace).stem}" if i == 0 else "",
                s.policy,
                f"{s.mean_cost:.2f}",
                f"{s.savings_vs_on_demand:.0%}",
                f"{s.cost_ratio_to_optimum:.2f}" if s.cost_ratio_to_optimum is not None else "-",
                f"{s.mean_completion_hours:.1f}" if s.mean_completion_hours is not None else "-",
                f"{s.deadlines_met}/{s.runs}",
                f"{s.work_lost_hours:.1f}",
                end_section=i == len(report.summaries) - 1,
            )
    return table


def simulate(
    traces: Annotated[
        Path,
        typer.Option(
            exists=True,
            file_okay=False,
            help="Directory of spot traces (searched recursively), e.g. ../shared/traces.",
        ),
    ],
    manifest: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="Job manifest (its deadline and work).")
    ] = None,
    work_hours: Annotated[
        float | None, typer.Option(min=0.01, help="Training hours on one instance.")
    ] = None,
    deadline_hours: Annotated[
        float | None, typer.Option(min=0.01, help="Deadline, hours after submission.")
    ] = None,
    checkpoint_minutes: Annotated[
        float, typer.Option(min=0.01, help="Duration of one checkpoint save.")
    ] = 5.0,
    restart_minutes: Annotated[
        float, typer.Option(min=0, help="Launch and restore overhead per (re)start.")
    ] = 20.0,
    interval_minutes: Annotated[
        float | None,
        typer.Option(
            min=0.1, help="Checkpoint interval; default auto (Daly, from the preemptions seen so far)."
        ),
    ] = None,
    silent_fraction: Annotated[
        float, typer.Option(min=0, max=1, help="Share of preemptions without a usable notice.")
    ] = 0.05,
    spot_price: Annotated[
        float, typer.Option(min=0, help="Spot price per instance-hour.")
    ] = DEFAULT_SPOT_PRICE,
    on_demand_price: Annotated[
        float, typer.Option(min=0.0001, help="On-demand price per instance-hour.")
    ] = DEFAULT_ON_DEMAND_PRICE,
    starts: Annotated[int, typer.Option(min=1, help="Start times per trace, spread over it.")] = 50,
    step_minutes: Annotated[int, typer.Option(min=1, help="Decision step (whole trace ticks).")] = 20,
    plot: Annotated[
        Path | None, typer.Option(dir_okay=False, help="Write a PNG of progress against time, one start.")
    ] = None,
    plot_trace: Annotated[
        str | None, typer.Option(help="The trace of the plot (default: the first).")
    ] = None,
    plot_start: Annotated[
        int, typer.Option(min=0, help="Which start time of that trace the plot shows.")
    ] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Replay spot traces for a job under each deadline policy and the omniscient optimum."""
    missing = "give --work-hours and --deadline-hours (or a manifest that has them)"
    manifest_work, manifest_deadline, in_steps = None, None, False
    if manifest is not None:
        manifest_work, manifest_deadline, missing, in_steps = _from_manifest(manifest)
    work = work_hours if work_hours is not None else manifest_work
    deadline = deadline_hours if deadline_hours is not None else manifest_deadline
    if work is None or deadline is None:
        raise fail(missing, code=2)
    job = _job(
        work,
        deadline,
        checkpoint_minutes,
        restart_minutes,
        spot_price,
        on_demand_price,
        interval_minutes,
        silent_fraction,
        in_steps,
    )
    try:
        loaded = load_traces(traces)
        reports = [simulate_trace(trace, job, starts, step_minutes * 60) for trace in loaded]
    except (TraceError, ValueError) as exc:
        raise fail(exc, code=2) from None
    if plot is not None:
        from spotrun.cli.display.simulate_plot import write_plot

        chosen = next((t for t in loaded if t.name == plot_trace), None) if plot_trace else loaded[0]
        if chosen is None:
            raise fail(f"no trace named {plot_trace!r} under {traces}", code=2)
        write_plot(plot, chosen, job, step_minutes * 60, starts, plot_start)
    answer: dict[str, Any] = {
        "job": {
            **job.__dict__,
            "training_rate_at_cap": run_rate(job.checkpoint_hours, job.max_interval_hours),
        },
        "traces": [r.as_dict() for r in reports],
        "overall": [o.__dict__ for o in overall(reports)],
    }
    if as_json:
        emit_json(_finite(answer))
        return
    out = console()
    out.print(_table(reports))
    for o in overall(reports):
        if o.policy != OPTIMUM:
            ratio = f"{o.cost_ratio_to_optimum:.2f}x the optimum" if o.cost_ratio_to_optimum else ""
            out.print(
                f"{o.policy}: {o.savings_vs_on_demand:.0%} below on-demand, {ratio}, "
                f"deadlines met {o.deadlines_met}/{o.runs}"
            )
    if plot is not None:
        out.print(f"plot: {plot}")


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value

"""The report's main chart: the attempts as a timeline across pools and zones (each state's duration, the warnings,
ends and restores), above the cost accrued against the same instance-time on demand; drawn by matplotlib."""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from spotrun.cli.report.figures import new_figure
from spotrun.cli.report.style import EVENT_MARKERS, STATE_COLOURS, STATE_LABELS, TimeAxis, time_axis
from spotrun.control.views.report_model import STANDBY_PHASE, JobReport

_ROW_HEIGHT = 0.42  # inches per pool row
_BAR = 0.62  # bar thickness, in rows


def _row_key(pool: str, node: int | None) -> str:
    return pool if node is None else f"{pool} node {node}"


def _rows(report: JobReport) -> dict[str, tuple[int, str]]:
    """Each row's key -> its place (1 under the job's states) and its label: one row per pool (a group: per pool
    and node), grouped by zone, zones and pools in order of first use."""
    # The attempts' zones first, then a zone where only an unused standby ran.
    zones = list(dict.fromkeys([*report.zones, *(span.availability_zone for span in report.instances)]))
    zone_rank = {zone: i for i, zone in enumerate(zones)}
    pool_rank = {pool: i for i, pool in enumerate(report.pools)}
    found: dict[str, tuple[tuple[int, int, int], str]] = {}
    for span in report.instances:
        node = span.node if span.group else None
        label = f"{span.availability_zone}  {span.instance_type}" + ("" if node is None else f" node {node}")
        rank = (zone_rank[span.availability_zone], pool_rank[span.pool], node or 0)
        found.setdefault(_row_key(span.pool, node), (rank, label))
    ordered = sorted(found.items(), key=lambda item: item[1][0])
    return {key: (place, label) for place, (key, (_, label)) in enumerate(ordered, start=1)}


def _draw_states(ax: Axes, report: JobReport, axis: TimeAxis, y: float) -> None:
    """The job's own row: each timeline state with its duration written in it where it fits."""
    span_width = max(axis.of(report.until), 1e-9)
    for state in report.states:
        start, end = axis.of(state.start), axis.of(state.end)
        if end <= start:
            continue
        ax.broken_barh(
            [(start, end - start)], (y - _BAR / 2, _BAR), facecolors=STATE_COLOURS[state.status.value]
        )
        # The state with its duration where both fit, the duration alone where only it does (the colour says the
        # state); about 0.7 % of the axis' width per character at this size.
        share = (end - start) / span_width
        took = axis.duration(state.seconds)
        for label in (f"{STATE_LABELS[state.status.value]} {took}", took):
            if share > 0.007 * len(label) + 0.008:
                ax.text((start + end) / 2, y, label, ha="center", va="center", fontsize=7, color="white")
                break


def _draw_instances(ax: Axes, report: JobReport, axis: TimeAxis, rows: dict[str, int]) -> None:
    for span in report.instances:
        y = rows[_row_key(span.pool, span.node if span.group else None)]
        for phase in span.phases:
            start, end = axis.of(phase.start), axis.of(phase.end)
            standby = phase.state == STANDBY_PHASE
            ax.broken_barh(
                [(start, max(end - start, 0.0))],
                (y - _BAR / 2, _BAR),
                facecolors=STATE_COLOURS[phase.state],
                edgecolor="#4a6fa5" if standby else "none",
                hatch="///" if standby else None,
                linewidth=0.4,
            )
        # Inside its bar's start (booting or standby: light colours), the row naming its pool and node.
        ax.annotate(
            "unused standby" if span.unused else f"#{span.attempt}",
            (axis.of(span.start), y),
            xytext=(2, 0),
            textcoords="offset points",
            ha="left",
            va="center",
            fontsize=7,
            color="#1d2430",
        )


def _draw_events(ax: Axes, report: JobReport, axis: TimeAxis, rows: dict[str, int]) -> None:
    for event in report.events:
        marker, colour, _ = EVENT_MARKERS[event.kind]
        y = rows[_row_key(event.pool, event.node)] + _BAR / 2 + 0.12
        ax.plot([axis.of(event.at)], [y], marker=marker, color=colour, markersize=6, linestyle="none")
    for restore in report.restores:
        if restore.restored_by is None:
            continue
        span = next(s for s in report.instances if s.attempt == restore.attempt and not s.unused)
        # On the bar, where training from it began, with the step it resumed from.
        marker, colour, _ = EVENT_MARKERS["restore"]
        x, y = axis.of(restore.restored_by), rows[_row_key(span.pool, span.node if span.group else None)]
        ax.plot(
            [x], [y], marker=marker, color=colour, markeredgecolor="white", markersize=6, linestyle="none"
        )
        ax.annotate(
            f"step {restore.step}",
            (x, y),
            xytext=(5, 0),
            textcoords="offset points",
            fontsize=6.5,
            color="white",
            va="center",
        )


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _timeline(ax: Axes, report: JobReport, axis: TimeAxis) -> list[Patch | Line2D]:
    """Draw the job's states and each row's instances; return the legend's entries."""
    placed = _rows(report)
    rows = {key: place for key, (place, _) in placed.items()}
    _draw_states(ax, report, axis, 0)
    # Zones as bands: the rows of one zone sit together, every other zone shaded.
    zone_of = {
        _row_key(span.pool, span.node if span.group else None): span.availability_zone
        for span in report.instances
    }
    for index, zone in enumerate(dict.fromkeys(zone_of[key] for key in rows)):
        members = [place for key, place in rows.items() if zone_of[key] == zone]
        if index % 2 == 0 and members:
            ax.axhspan(min(members) - 0.5, max(members) + 0.5, color="#f2f4f7", zorder=0)
    _draw_instances(ax, report, axis, rows)
    _draw_events(ax, report, axis, rows)
    ax.set_yticks([0, *rows.values()], ["job state", *[label for _, label in placed.values()]])
    ax.set_ylim(len(rows) + 0.75, -0.75)
    ax.tick_params(axis="y", length=0)
    attempts = sum(1 for row in report.attempts if not row.unused)
    ax.set_title(
        f"{report.name} ({report.job_id}): {_plural(attempts, 'attempt')} in "
        f"{_plural(len(report.zones), 'zone')}, {report.status.value}",
        loc="left",
        fontsize=10,
    )
    present = {phase.state for span in report.instances for phase in span.phases}
    present |= {state.status.value for state in report.states}
    handles: list[Patch | Line2D] = [
        Patch(facecolor=colour, label=STATE_LABELS[state], hatch="///" if state == STANDBY_PHASE else None)
        for state, colour in STATE_COLOURS.items()
        if state in present
    ]
    kinds = {event.kind for event in report.events} | ({"restore"} if report.restores else set())
    for kind, (marker, colour, label) in EVENT_MARKERS.items():
        if kind in kinds:
            handles.append(Line2D([], [], marker=marker, color=colour, linestyle="none", label=label))
    return handles


def _cost(ax: Axes, report: JobReport, axis: TimeAxis) -> None:
    xs = [axis.of(point.at) for point in report.cost_series]
    paid = [point.paid_usd for point in report.cost_series]
    on_demand = [point.on_demand_usd for point in report.cost_series]
    ax.plot(
        xs, on_demand, color="#9e9e9e", linestyle="--", linewidth=1.2, label="same instance-time on demand"
    )
    ax.plot(xs, paid, color="#1f6feb", linewidth=1.8, label="paid")
    ax.fill_between(xs, paid, on_demand, color="#1f6feb", alpha=0.08, linewidth=0)
    if xs:
        saved = "" if report.cost.savings_pct is None else f" ({report.cost.savings_pct:.1f} % saved)"
        ax.annotate(
            f"${paid[-1]:.4f}{saved}",
            (xs[-1], paid[-1]),
            xytext=(4, 0),
            textcoords="offset points",
            fontsize=7.5,
            color="#1f6feb",
            va="center",
        )
        ax.annotate(
            f"${on_demand[-1]:.4f}",
            (xs[-1], on_demand[-1]),
            xytext=(4, 0),
            textcoords="offset points",
            fontsize=7.5,
            color="#616161",
            va="center",
        )
    ax.set_ylabel("accrued cost (USD)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=7, frameon=False)
    ax.grid(axis="y", color="#eeeeee", linewidth=0.6)


def main_figure(report: JobReport) -> Figure:
    """The attempts as a timeline across pools and zones (with each state's duration, warnings, ends and restores)
    above the cost accrued against the same instance-time on demand."""
    axis = time_axis(report.created_at, report.until)
    rows = len(_rows(report)) + 1
    timeline_height = 0.6 + _ROW_HEIGHT * rows
    # The legend's rows go under the charts: about 0.2 inch each, five entries a row.
    figure, (timeline, cost) = new_figure(10.5, timeline_height + 3.0, [timeline_height, 2.0])
    handles = _timeline(timeline, report, axis)
    _cost(cost, report, axis)
    figure.legend(handles=handles, loc="outside lower center", ncol=5, fontsize=7, frameon=False)
    cost.set_xlabel(axis.label)
    cost.set_xlim(0, max(axis.of(report.until), 1e-9) * 1.08)
    return figure

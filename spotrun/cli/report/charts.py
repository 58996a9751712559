"""The report's charts, drawn by matplotlib: the main chart (the attempts across pools and zones, above the cost
accrued against on-demand), the training metrics and the GPU readings, each against time since submission.

Figures are built from :class:`matplotlib.figure.Figure` and saved through the Agg canvas: pyplot, its global
figure registry and the process's backend choice are never touched, so the charts can be drawn inside a server
(the dashboard) or beside code that uses pyplot. The styles that make the output byte-stable (the SVG id salt,
text as text) are set in an :func:`matplotlib.rc_context` around each save only.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.typing import RcKeyType

from spotrun.cli.report.style import (
    EVENT_MARKERS,
    STATE_COLOURS,
    STATE_LABELS,
    TimeAxis,
    series_colour,
    time_axis,
)
from spotrun.control.views.report_model import STANDBY_PHASE, JobReport
from spotrun.model.job.telemetry import GPU_MEMORY_HIGH_PERCENT

# At most this many metrics get a panel of their own; the table lists every one.
MAX_METRIC_PANELS = 6
# Matplotlib's defaults but for these: stable ids (the salt), text kept as text (smaller, searchable, the page's
# font), no creation date; DejaVu Sans ships with matplotlib, so every machine draws the same glyphs.
_RC: dict[RcKeyType, Any] = {
    "svg.hashsalt": "spotrun-report",
    "svg.fonttype": "none",
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "text.parse_math": False,  # a '$' in a name is a dollar sign, never mathtext
    "axes.spines.top": False,
    "axes.spines.right": False,
}
_SVG_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
_PNG_METADATA = {"Software": None}
_ROW_HEIGHT = 0.42  # inches per pool row
_BAR = 0.62  # bar thickness, in rows


@contextmanager
def _style() -> Iterator[None]:
    with matplotlib.rc_context(_RC):
        yield


def _figure(width: float, height: float, rows: list[float]) -> tuple[Figure, list[Axes]]:
    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)  # the figure's canvas: Agg, whatever backend the process chose
    axes = figure.subplots(len(rows), 1, sharex=True, gridspec_kw={"height_ratios": rows}, squeeze=False)
    return figure, [row[0] for row in axes]


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
    figure, (timeline, cost) = _figure(10.5, timeline_height + 3.0, [timeline_height, 2.0])
    handles = _timeline(timeline, report, axis)
    _cost(cost, report, axis)
    figure.legend(handles=handles, loc="outside lower center", ncol=5, fontsize=7, frameon=False)
    cost.set_xlabel(axis.label)
    cost.set_xlim(0, max(axis.of(report.until), 1e-9) * 1.08)
    return figure


def _attempt_boundaries(ax: Axes, report: JobReport, axis: TimeAxis) -> None:
    for event in report.events:
        if event.kind in {"interruption", "restart"}:
            ax.axvline(axis.of(event.at), color="#e6550d", linewidth=0.8, linestyle=":")


def metric_names(report: JobReport) -> list[str]:
    """The metrics that get a panel: the first :data:`MAX_METRIC_PANELS` by name."""
    return sorted(report.metrics)[:MAX_METRIC_PANELS]


def metrics_by_step(report: JobReport) -> bool:
    """Whether the metrics are drawn against the training step (every point has one) rather than time.

    A report's time is when the agent read it from the metrics file, and it reads what was written since its last
    read at once: steps read together share one time, and against time they would stack in vertical strokes.
    """
    return all(point.step is not None for name in metric_names(report) for point in report.metrics[name])


def metrics_figure(report: JobReport) -> Figure | None:
    """One panel per training metric (:func:`metric_names`), each attempt in its colour, against the training step
    (:func:`metrics_by_step`; where an attempt resumed, a dotted line) or else against time."""
    names = metric_names(report)
    if not names:
        return None
    axis = time_axis(report.created_at, report.until)
    by_step = metrics_by_step(report)
    figure, panels = _figure(10.5, 0.6 + 1.7 * len(names), [1.0] * len(names))
    attempts = sorted({span.attempt for span in report.instances})
    drawn: dict[int, str] = {}  # attempt -> its colour, for one legend over every panel
    for ax, name in zip(panels, names, strict=True):
        points = report.metrics[name]
        for attempt in sorted({p.attempt for p in points}):
            # A group's metrics are its rank 0's (node 0); any node's when node 0 reported none.
            mine = [p for p in points if p.attempt == attempt and p.node == 0] or [
                p for p in points if p.attempt == attempt
            ]
            colour = series_colour(attempts.index(attempt) if attempt in attempts else attempt)
            drawn[attempt] = colour
            ax.plot(
                [float(p.step or 0) if by_step else axis.of(p.at) for p in mine],
                [p.value for p in mine],
                color=colour,
                linewidth=1.3,
                marker="." if len(mine) < 40 else None,
                markersize=3,
            )
        if by_step:
            for restore in report.restores:
                ax.axvline(restore.step, color="#e6550d", linewidth=0.8, linestyle=":")
        else:
            _attempt_boundaries(ax, report, axis)
        ax.set_ylabel(name)
        ax.grid(axis="y", color="#eeeeee", linewidth=0.6)
    handles = [
        Line2D([], [], color=colour, linewidth=1.3, label=f"attempt {attempt}")
        for attempt, colour in sorted(drawn.items())
    ]
    if by_step and report.restores:
        handles.append(Line2D([], [], color="#e6550d", linewidth=0.8, linestyle=":", label="resumed from"))
    figure.legend(handles=handles, loc="outside right upper", fontsize=7, frameon=False)
    panels[0].set_title("training metrics", loc="left", fontsize=10)
    if by_step:
        panels[-1].set_xlabel("training step")
    else:
        panels[-1].set_xlabel(axis.label)
        panels[-1].set_xlim(0, max(axis.of(report.until), 1e-9) * 1.02)
    return figure


def gpu_figure(report: JobReport) -> Figure | None:
    """Utilisation and memory of every GPU of every node, per attempt; the memory line at which a node is flagged."""
    if not report.gpu:
        return None
    axis = time_axis(report.created_at, report.until)
    figure, (utilization, memory) = _figure(10.5, 4.4, [1.0, 1.0])
    keys = sorted({(p.node, p.gpu) for p in report.gpu})
    for attempt in sorted({p.attempt for p in report.gpu}):
        for node, gpu in keys:
            mine = [p for p in report.gpu if p.attempt == attempt and p.node == node and p.gpu == gpu]
            if not mine:
                continue
            colour = series_colour(keys.index((node, gpu)))
            label = f"node {node} GPU {gpu}" if attempt == min(p.attempt for p in report.gpu) else None
            xs = [axis.of(p.at) for p in mine]
            utilization.plot(xs, [p.utilization for p in mine], color=colour, linewidth=1.1, label=label)
            memory.plot(xs, [p.memory_percent for p in mine], color=colour, linewidth=1.1)
    memory.axhline(GPU_MEMORY_HIGH_PERCENT, color="#a50f15", linewidth=0.8, linestyle="--")
    memory.annotate(
        f"{GPU_MEMORY_HIGH_PERCENT:g} %: flagged",
        (0, GPU_MEMORY_HIGH_PERCENT),
        xytext=(2, 2),
        textcoords="offset points",
        fontsize=6.5,
        color="#a50f15",
    )
    for ax, label in ((utilization, "GPU utilisation (%)"), (memory, "GPU memory used (%)")):
        _attempt_boundaries(ax, report, axis)
        ax.set_ylim(0, 105)
        ax.set_ylabel(label)
        ax.grid(axis="y", color="#eeeeee", linewidth=0.6)
    utilization.set_title("GPUs", loc="left", fontsize=10)
    if len(keys) <= 16:
        utilization.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    memory.set_xlabel(axis.label)
    memory.set_xlim(0, max(axis.of(report.until), 1e-9) * 1.02)
    return figure


_PROLOG = re.compile(r"\A.*?(?=<svg\b)", re.DOTALL)
_SIZE = re.compile(r'\s(?:width|height)="[^"]*pt"')
_NAMESPACES = re.compile(r'\sxmlns(?::xlink)?="[^"]*"')


def svg(build: Callable[[JobReport], Figure | None], report: JobReport, prefix: str) -> str | None:
    """The chart ``build`` draws of ``report``, as an ``<svg>`` element for an HTML page; None when it has none.

    The XML prolog and DOCTYPE go (an HTML page holds the element, not a document), and so do the namespace
    declarations: the HTML parser puts an inline ``<svg>`` and its ``xlink:href`` in their namespaces by itself
    (https://html.spec.whatwg.org/multipage/parsing.html#adjust-foreign-attributes). Ids are prefixed, so that
    several charts in one page never share one; the fixed size gives way to the page's width (the viewBox stays).
    """
    buffer = io.StringIO()
    with _style():
        figure = build(report)
        if figure is None:
            return None
        figure.savefig(buffer, format="svg", metadata=_SVG_METADATA)
    text = _PROLOG.sub("", buffer.getvalue(), count=1)
    opening, rest = text.split(">", 1)
    opening = _NAMESPACES.sub("", _SIZE.sub("", opening))
    rest = rest.replace('id="', f'id="{prefix}-').replace('href="#', f'href="#{prefix}-')
    rest = rest.replace("url(#", f"url(#{prefix}-")
    return f'{opening} class="chart" role="img">{rest}'.strip()


def png(report: JobReport, path: Path, dpi: int = 130) -> None:
    """Write the main chart (:func:`main_figure`) as a PNG; no software tag, so the same report gives the same
    bytes."""
    with _style():
        main_figure(report).savefig(path, format="png", dpi=dpi, metadata=_PNG_METADATA)

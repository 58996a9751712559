"""The report's charts of the job's telemetry: its training metrics, and its GPUs' utilisation and memory."""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from spotrun.cli.report.figures import new_figure
from spotrun.cli.report.style import TimeAxis, series_colour, time_axis
from spotrun.control.views.report_model import JobReport
from spotrun.model.job.telemetry import GPU_MEMORY_HIGH_PERCENT, GpuPoint, MetricPoint

# At most this many metrics get a panel of their own; the table lists every one.
MAX_METRIC_PANELS = 6


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
    figure, panels = new_figure(10.5, 0.6 + 1.7 * len(names), [1.0] * len(names))
    attempts = sorted({span.attempt for span in report.instances})
    drawn: dict[int, str] = {}  # attempt -> its colour, for one legend over every panel
    for ax, name in zip(panels, names, strict=True):
        per_attempt: dict[int, list[MetricPoint]] = {}
        for point in report.metrics[name]:
            per_attempt.setdefault(point.attempt, []).append(point)
        for attempt, reported in sorted(per_attempt.items()):
            # A group's metrics are its rank 0's (node 0); any node's when node 0 reported none.
            mine = [p for p in reported if p.node == 0] or reported
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
    figure, (utilization, memory) = new_figure(10.5, 4.4, [1.0, 1.0])
    series: dict[
        tuple[int, int, int], list[GpuPoint]
    ] = {}  # (attempt, node, GPU) -> its readings, in time order
    for point in report.gpu:
        series.setdefault((point.attempt, point.node, point.gpu), []).append(point)
    keys = sorted({(node, gpu) for _, node, gpu in series})
    labelled: set[tuple[int, int]] = set()
    for (_, node, gpu), mine in sorted(series.items()):
        colour = series_colour(keys.index((node, gpu)))
        label = None if (node, gpu) in labelled else f"node {node} GPU {gpu}"
        labelled.add((node, gpu))
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

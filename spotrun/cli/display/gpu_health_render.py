"""A job's GPU health and latest training metrics rendered: the rich tables of ``spotrun status``, the lines of the
live view, and what ``status --json`` adds (the picture itself: :mod:`spotrun.cli.display.gpu_health`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.table import Table
from rich.text import Text

from spotrun.cli.display.gpu_health import (
    GpuNow,
    MemoryHigh,
    NodeGpus,
    latest_metrics,
    latest_node_gpus,
    memory_high_flags,
)
from spotrun.model.job.record import Job
from spotrun.model.job.telemetry import GPU_MEMORY_HIGH_PERCENT, JobTelemetry, MetricPoint

HIGH_STYLE = "bold red"


def _clock(at: datetime) -> str:
    return at.strftime("%H:%M:%S")


def _value(value: float) -> str:
    return f"{value:.4g}"


def _pcie(gpu: GpuNow) -> str:
    if gpu.pcie_rx_mib_s is None and gpu.pcie_tx_mib_s is None:
        return "-"
    rx = "?" if gpu.pcie_rx_mib_s is None else f"{gpu.pcie_rx_mib_s:.0f}"
    tx = "?" if gpu.pcie_tx_mib_s is None else f"{gpu.pcie_tx_mib_s:.0f}"
    return f"{rx} / {tx}"


def _memory(gpu: GpuNow) -> Text:
    text = f"{gpu.memory_percent:.1f} %"
    if gpu.memory_used_mib is not None and gpu.memory_total_mib is not None:
        text += f" ({gpu.memory_used_mib / 1024:.1f} of {gpu.memory_total_mib / 1024:.1f} GiB)"
    if gpu.memory_high:
        return Text(f"{text} HIGH", style=HIGH_STYLE)
    return Text(text)


def gpu_table(nodes: list[NodeGpus], now: datetime) -> Table:
    """One row per GPU of each node: utilization, memory (flagged above 90 %), PCIe rx / tx, when sampled."""
    table = Table(
        title=f"GPU health (attempt {nodes[0].attempt})" if nodes else "GPU health", title_justify="left"
    )
    for column in ("node", "instance", "gpu", "util", "memory", "PCIe rx / tx MiB/s", "sampled (UTC)"):
        table.add_column(
            column, justify="right" if column in ("node", "gpu", "util") else "left", no_wrap=True
        )
    for node in nodes:
        age = max(0.0, (now - node.at).total_seconds())
        sampled = f"{_clock(node.at)} ({age:.0f} s ago)"
        for gpu in node.gpus:
            table.add_row(
                str(node.node),
                node.instance_id,
                str(gpu.index),
                f"{gpu.utilization:.0f} %",
                _memory(gpu),
                _pcie(gpu),
                sampled,
            )
    return table


def memory_high_text(flags: list[MemoryHigh]) -> Text | None:
    """``GPU memory above 90 %: attempt 2 node 0 GPU 1 at 96.1 % (12:04:31 UTC)``, one line each; None: none."""
    if not flags:
        return None
    lines = [
        f"GPU memory above {GPU_MEMORY_HIGH_PERCENT:g} %: attempt {f.attempt} node {f.node} GPU {f.gpu} at "
        f"{f.percent:.1f} % ({_clock(f.at)} UTC); an out-of-memory error may follow"
        for f in flags
    ]
    return Text("\n".join(lines), style=HIGH_STYLE)


def metrics_table(latest: dict[str, MetricPoint]) -> Table:
    """The latest value of each metric the script reported, with its step, attempt and time."""
    table = Table(title="latest metrics", title_justify="left")
    table.add_column("metric")
    for column in ("value", "step", "attempt"):
        table.add_column(column, justify="right")
    table.add_column("at (UTC)")
    for name, point in latest.items():
        table.add_row(
            name,
            _value(point.value),
            "-" if point.step is None else str(point.step),
            str(point.attempt),
            _clock(point.at),
        )
    return table


def metrics_line(latest: dict[str, MetricPoint]) -> Text:
    """``metrics at step 120: loss 0.412, accuracy 0.88`` (the step of the newest point)."""
    newest = max(latest.values(), key=lambda p: (p.at, -1 if p.step is None else p.step))
    where = f" at step {newest.step}" if newest.step is not None else ""
    values = ", ".join(f"{name} {_value(point.value)}" for name, point in latest.items())
    return Text(f"metrics{where}: {values}")


def gpu_lines(nodes: list[NodeGpus]) -> list[Text]:
    """The live view's GPU health: one line per node, each GPU's utilization and memory (flagged above 90 %).

    ``GPUs node 0 (12:04:31): #0 97 % mem 62.0 %, #1 95 % mem 93.1 % HIGH``.
    """
    lines = []
    for node in nodes:
        line = Text(f"GPUs node {node.node} ({_clock(node.at)}): ")
        for i, gpu in enumerate(node.gpus):
            if i:
                line.append(", ")
            line.append(f"#{gpu.index} {gpu.utilization:.0f} % mem {gpu.memory_percent:.1f} %")
            if gpu.memory_high:
                line.append(" HIGH", style=HIGH_STYLE)
        lines.append(line)
    return lines


def health_parts(
    job: Job, telemetry: JobTelemetry | None, now: datetime, problem: str | None = None
) -> list[Any]:
    """What ``spotrun status`` shows of the job's GPUs and metrics: the GPU table, the memory warnings, the
    latest metrics, and why the telemetry is missing (when it is)."""
    parts: list[Any] = []
    nodes = latest_node_gpus(job, telemetry)
    if nodes:
        parts.append(gpu_table(nodes, now))
    flags = memory_high_text(memory_high_flags(job, telemetry))
    if flags is not None:
        parts.append(flags)
    latest = latest_metrics(telemetry)
    if latest:
        parts.append(metrics_table(latest))
    if problem is not None:
        parts.append(Text(problem, style="dim"))
    return parts


def live_parts(job: Job, telemetry: JobTelemetry | None) -> list[Text]:
    """What the live view redraws of the job's GPUs and metrics: a line per node, the memory warnings, the
    latest metrics in one line."""
    parts: list[Text] = gpu_lines(latest_node_gpus(job, telemetry))
    flags = memory_high_text(memory_high_flags(job, telemetry))
    if flags is not None:
        parts.append(flags)
    latest = latest_metrics(telemetry)
    if latest:
        parts.append(metrics_line(latest))
    return parts


def health_json(job: Job, telemetry: JobTelemetry | None, problem: str | None = None) -> dict[str, Any]:
    """What ``status --json`` adds to the job's view.

    Returns
    -------
    dict
        ``gpu_health``: per node of the latest attempt ``{attempt, node, instance_id, at, source, gpus: [{index,
        utilization, memory_percent, memory_used_mib, memory_total_mib, pcie_rx_mib_s, pcie_tx_mib_s,
        memory_high}]}``; ``gpu_memory_warnings``: every first reading above 90 % ``{attempt, node, gpu, percent,
        at}``; ``latest_metrics``: ``{name: {value, step, attempt, node, at}}``; ``telemetry_error`` when the
        telemetry could not be read.
    """
    nodes = [
        {
            "attempt": n.attempt,
            "node": n.node,
            "instance_id": n.instance_id,
            "at": n.at.isoformat(),
            "source": n.source,
            "gpus": [
                {
                    "index": g.index,
                    "utilization": g.utilization,
                    "memory_percent": g.memory_percent,
                    "memory_used_mib": g.memory_used_mib,
                    "memory_total_mib": g.memory_total_mib,
                    "pcie_rx_mib_s": g.pcie_rx_mib_s,
                    "pcie_tx_mib_s": g.pcie_tx_mib_s,
                    "memory_high": g.memory_high,
                }
                for g in n.gpus
            ],
        }
        for n in latest_node_gpus(job, telemetry)
    ]
    flags = [
        {"attempt": f.attempt, "node": f.node, "gpu": f.gpu, "percent": f.percent, "at": f.at.isoformat()}
        for f in memory_high_flags(job, telemetry)
    ]
    metrics = {
        name: {
            "value": p.value,
            "step": p.step,
            "attempt": p.attempt,
            "node": p.node,
            "at": p.at.isoformat(),
        }
        for name, p in latest_metrics(telemetry).items()
    }
    answer: dict[str, Any] = {"gpu_health": nodes, "gpu_memory_warnings": flags, "latest_metrics": metrics}
    if problem is not None:
        answer["telemetry_error"] = problem
    return answer

"""A job's telemetry parts, read back: bad lines skipped, series ordered and thinned, metric names bounded."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from spotrun.model.job.telemetry import (
    GPU_MEMORY_HIGH_PERCENT,
    MAX_METRIC_NAMES,
    assemble,
    parse_lines,
    thin,
)

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def metrics(seconds: float, step: int, **values: float) -> str:
    return json.dumps({"kind": "metrics", "at": at(seconds), "step": step, "values": values})


def gpu(seconds: float, *readings: tuple[float, float]) -> str:
    """A sample of GPUs of 1,000 MiB, each ``(utilization, memory_used_mib)``."""
    gpus = [
        {"index": i, "utilization": u, "memory_used_mib": m, "memory_total_mib": 1000.0}
        for i, (u, m) in enumerate(readings)
    ]
    return json.dumps({"kind": "gpu", "at": at(seconds), "gpus": gpus})


def test_lines_not_of_a_telemetry_shape_are_skipped_and_counted() -> None:
    # Given a part with good lines among broken JSON, an unknown kind, a utilization past 100 and a bad name
    text = "\n".join(
        [
            metrics(1, 10, loss=0.5),
            "{not json",
            json.dumps({"kind": "other", "at": at(2)}),
            gpu(3, (140.0, 10.0)),
            json.dumps({"kind": "metrics", "at": at(4), "values": {"bad name!": 1.0}}),
            "",
            gpu(5, (90.0, 10.0)),
        ]
    )
    # When it is parsed
    lines, skipped = parse_lines(text)
    # Then the two good lines are kept, the four bad ones counted (the blank one is no line)
    assert [line.kind for line in lines] == ["metrics", "gpu"]
    assert skipped == 4


def test_non_finite_values_are_dropped_from_their_line() -> None:
    # Given a metrics line with a NaN (Python's json writes it) beside a finite value
    lines, skipped = parse_lines(
        f'{{"kind": "metrics", "at": "{at(0)}", "values": {{"loss": NaN, "acc": 0.9}}}}'
    )
    # Then the line is kept with its finite value only
    assert skipped == 0
    assert lines[0].values == {"acc": 0.9}


def test_parts_from_several_attempts_and_nodes_assemble_in_time_order() -> None:
    # Given parts of two attempts and two nodes, given out of order
    parts = [
        (2, 0, metrics(30, 300, loss=0.2)),
        (1, 1, metrics(20, 200, loss=0.3) + "\n" + gpu(21, (50.0, 950.0), (10.0, 100.0))),
        (1, 0, metrics(10, 100, loss=0.4, accuracy=0.8)),
    ]
    # When they are assembled
    telemetry = assemble(parts)
    # Then each metric is in time order with its attempt, node and step, and the GPU points carry their place
    assert [(p.attempt, p.node, p.step, p.value) for p in telemetry.metrics["loss"]] == [
        (1, 0, 100, 0.4),
        (1, 1, 200, 0.3),
        (2, 0, 300, 0.2),
    ]
    assert [p.value for p in telemetry.metrics["accuracy"]] == [0.8]
    assert [(p.attempt, p.node, p.gpu, p.utilization, p.memory_percent) for p in telemetry.gpu] == [
        (1, 1, 0, 50.0, 95.0),
        (1, 1, 1, 10.0, 10.0),
    ]
    assert not telemetry.thinned


def test_memory_high_lists_the_readings_above_90_percent() -> None:
    # Given GPUs at 90 % exactly and at 95 %
    telemetry = assemble([(1, 0, gpu(0, (90.0, 900.0), (90.0, 950.0)))])
    # Then only the one above the threshold is high
    assert GPU_MEMORY_HIGH_PERCENT == 90.0
    assert [(p.gpu, p.memory_percent) for p in telemetry.memory_high] == [(1, 95.0)]


def test_long_series_are_thinned_evenly_keeping_the_first_and_last() -> None:
    # Given 1,000 loss points and 1,000 GPU samples of one GPU
    text = "\n".join(
        [metrics(i, i, loss=float(i)) for i in range(1000)]
        + [gpu(i, (float(i % 100), 1.0)) for i in range(1000)]
    )
    # When assembled with at most 10 points a series
    telemetry = assemble([(1, 0, text)], limit=10)
    # Then each series holds 10 evenly spaced points, the first and last among them, and thinned says so
    steps = [p.step for p in telemetry.metrics["loss"]]
    assert steps == [0, 111, 222, 333, 444, 555, 666, 777, 888, 999]
    assert len(telemetry.gpu) == 10
    assert telemetry.gpu[0].at == T0
    assert telemetry.gpu[-1].at == T0 + timedelta(seconds=999)
    assert telemetry.thinned


def test_thin_leaves_a_short_series_alone() -> None:
    # Given 5 points and room for 10, or for 1 or none
    points = list(range(5))
    # Then the short series is whole, and the tiny limits keep the last point or nothing
    assert thin(points, 10) == points
    assert thin(points, 1) == [4]
    assert thin(points, 0) == []


def test_metric_names_past_the_bound_are_dropped_but_known_names_keep_coming() -> None:
    # Given a first line with the most names a job may have, then a line with a new name and a known one
    first = {f"m{i}": float(i) for i in range(MAX_METRIC_NAMES)}
    text = "\n".join(
        [
            json.dumps({"kind": "metrics", "at": at(0), "step": 0, "values": first}),
            metrics(1, 1, extra=1.0, m0=5.0),
        ]
    )
    # When assembled
    telemetry = assemble([(1, 0, text)])
    # Then the new name is left out and the known one has both points
    assert len(telemetry.metrics) == MAX_METRIC_NAMES
    assert "extra" not in telemetry.metrics
    assert [p.value for p in telemetry.metrics["m0"]] == [0.0, 5.0]


def test_a_line_with_more_names_than_the_bound_is_skipped() -> None:
    # Given one line naming one more metric than a line may hold
    values = {f"m{i}": 1.0 for i in range(MAX_METRIC_NAMES + 1)}
    # When parsed
    lines, skipped = parse_lines(json.dumps({"kind": "metrics", "at": at(0), "values": values}))
    # Then it is skipped, never trusted in part
    assert lines == []
    assert skipped == 1

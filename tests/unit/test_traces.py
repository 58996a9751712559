"""Spot traces read at the edge, validated with clear errors (spotrun.model.simulation.traces)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotrun.model.simulation.traces import (
    TraceError,
    TraceKind,
    dumps_trace,
    load_traces,
    parse_trace,
    preemptions,
    spot_mtbf_hours,
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_directory_is_read_recursively_with_kinds_from_the_path(tmp_path: Path) -> None:
    # Given a preemption and an availability trace in nested folders, and an unrelated file
    write(tmp_path / "preemption" / "1-node" / "a.json", dumps_trace(32, [1, 1, 0, 1]))
    write(tmp_path / "availability" / "b.json", dumps_trace(600, [0, 1]))
    write(tmp_path / "README.md", "# not a trace")
    # When the directory is loaded
    traces = load_traces(tmp_path)
    # Then both are there, sorted by name, with their kind, tick and capacity
    assert [(t.name, t.kind, t.gap_seconds) for t in traces] == [
        ("availability/b.json", TraceKind.AVAILABILITY, 600),
        ("preemption/1-node/a.json", TraceKind.PREEMPTION, 32),
    ]
    assert traces[1].capacity == (1, 1, 0, 1)
    assert traces[1].hours == pytest.approx(4 * 32 / 3600)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json", "not a spot trace"),
        ('{"data": [1, 0]}', "metadata"),
        ('{"metadata": {"gap_seconds": 0}, "data": [1, 0]}', "gap_seconds"),
        ('{"metadata": {"gap_seconds": 60}, "data": [1]}', "data"),
        ('{"metadata": {"gap_seconds": 60}, "data": [1, "x"]}', "data.1"),
    ],
)
def test_a_malformed_trace_is_refused_naming_the_file_and_field(text: str, problem: str) -> None:
    with pytest.raises(TraceError, match=rf"^bad\.json: .*{problem}"):
        parse_trace("bad.json", text)


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(TraceError, match="negative"):
        parse_trace("neg.json", dumps_trace(60, [1, -1]))


def test_a_missing_or_empty_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="not a directory"):
        load_traces(tmp_path / "absent")
    with pytest.raises(TraceError, match=r"no \*\.json"):
        load_traces(tmp_path)


def test_resampling_keeps_spot_only_where_every_tick_had_it() -> None:
    # Given 32-second ticks with one gap inside the second group of ten
    trace = parse_trace("t", dumps_trace(32, [1] * 10 + [1] * 5 + [0] + [1] * 4 + [1] * 3))
    # When resampled to about 320-second steps
    seconds, flags = trace.steps(320)
    # Then a step is whole ticks, the gap makes its step unusable, and the partial last step is dropped
    assert seconds == 320
    assert flags == (True, False)


def test_preemptions_and_the_mean_time_between_them() -> None:
    # Given spot held 3 steps, lost, held 1, lost
    flags = (True, True, True, False, True, False)
    # Then two preemptions, at steps 3 and 5, over 4 spot steps of 0.5 h: one per hour
    assert preemptions(flags) == [3, 5]
    assert spot_mtbf_hours(flags, 0.5) == pytest.approx(1.0)
    assert spot_mtbf_hours((True, True), 0.5) == float("inf")

"""``spotrun simulate`` end to end on small traces: the table, --json, --plot and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotrun.cli.app import app
from spotrun.model.simulation.traces import dumps_trace

JOB = ["--work-hours", "6", "--deadline-hours", "10", "--starts", "5"]


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    # Two days of 10-minute ticks: one pool with spot 5 hours in 6, one that never has it.
    root = tmp_path / "traces"
    (root / "availability").mkdir(parents=True)
    (root / "availability" / "often.json").write_text(dumps_trace(600, ([1] * 30 + [0] * 6) * 8))
    (root / "availability" / "never.json").write_text(dumps_trace(600, [0] * 288))
    return root


def table_rows(output: str) -> list[tuple[str, list[str]]]:
    """The table's body rows as (trace, cells), the trace carried down from its first row."""
    rows, trace = [], ""
    for line in output.splitlines():
        if not line.startswith("│"):
            continue
        cells = [cell.strip() for cell in line.strip("│").split("│")]
        trace = cells[0] or trace
        rows.append((trace, cells))
    return rows


def test_the_table_lists_every_policy_for_every_trace(traces: Path) -> None:
    # Given two traces; When simulate runs
    result = CliRunner().invoke(app, ["simulate", "--traces", str(traces), *JOB])
    # Then it succeeds, with one row per trace for each policy and the optimum, in order, and the optimum's
    # cost is 1.00 x itself
    assert result.exit_code == 0, result.output
    names = ["on-demand", "spot-only", "greedy", "uniform-progress", "spotrun", "optimum"]
    rows = table_rows(result.output)
    assert [(trace, row[1]) for trace, row in rows] == [
        (trace, name) for trace in ("availability: never", "availability: often") for name in names
    ]
    assert [row[4] for _, row in rows if row[1] == "optimum"] == ["1.00", "1.00"]
    assert "spotrun:" in result.output
    assert "deadlines met" in result.output


def test_json_is_exactly_one_object_with_every_trace(traces: Path) -> None:
    # Given two traces; When simulate runs with --json
    result = CliRunner().invoke(app, ["simulate", "--traces", str(traces), *JOB, "--json"])
    # Then stdout is one JSON object, with both traces, every policy and the interval's why
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert sorted(t["trace"] for t in answer["traces"]) == [
        "availability/never.json",
        "availability/often.json",
    ]
    never = next(t for t in answer["traces"] if t["trace"].endswith("never.json"))
    by_policy = {p["policy"]: p for p in never["policies"]}
    # On a pool that never has spot, spotrun pays on-demand's price and meets every deadline; spot-only meets none
    assert by_policy["spotrun"]["deadlines_met"] == 5
    assert by_policy["spot-only"]["deadlines_met"] == 0
    assert by_policy["spotrun"]["mean_cost"] == pytest.approx(by_policy["on-demand"]["mean_cost"])
    assert "interval" in never["interval"]["why"]
    assert answer["job"]["work_hours"] == 6


def test_a_deadline_even_on_demand_cannot_meet_is_refused(traces: Path) -> None:
    result = CliRunner().invoke(
        app, ["simulate", "--traces", str(traces), "--work-hours", "10", "--deadline-hours", "9"]
    )
    assert result.exit_code == 2
    assert "even on-demand cannot meet" in result.output


def test_the_work_and_deadline_are_required(traces: Path) -> None:
    result = CliRunner().invoke(app, ["simulate", "--traces", str(traces), "--work-hours", "10"])
    assert result.exit_code == 2
    assert "--deadline-hours" in result.output


def test_a_bad_trace_is_named(traces: Path) -> None:
    (traces / "availability" / "broken.json").write_text('{"metadata": {}, "data": [1, 0]}')
    result = CliRunner().invoke(app, ["simulate", "--traces", str(traces), *JOB])
    assert result.exit_code == 2
    assert "broken.json" in result.output
    assert "gap_seconds" in result.output


def test_plot_writes_a_png(traces: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    # Given a plot file asked for; When simulate runs
    png = tmp_path / "progress.png"
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            "--traces",
            str(traces),
            *JOB,
            "--plot",
            str(png),
            "--plot-trace",
            "availability/often.json",
        ],
    )
    # Then a PNG is written
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tiny-regression" / "manifest.yaml"


def test_a_manifest_without_a_deadline_needs_the_flags(traces: Path) -> None:
    # Given a manifest that has no capacity.deadline nor training.expected_hours (yet)
    # When simulate reads it without the flags, then with them
    without = CliRunner().invoke(app, ["simulate", "--traces", str(traces), "--manifest", str(EXAMPLE)])
    with_flags = CliRunner().invoke(
        app, ["simulate", "--traces", str(traces), "--manifest", str(EXAMPLE), *JOB]
    )
    # Then it asks for them, and with them it runs
    assert without.exit_code == 2
    assert "--work-hours" in without.output
    assert with_flags.exit_code == 0, with_flags.output


def test_overall_lines_sum_every_trace(traces: Path) -> None:
    # Given two traces of 5 starts each; When simulate answers in JSON
    answer = json.loads(CliRunner().invoke(app, ["simulate", "--traces", str(traces), *JOB, "--json"]).stdout)
    # Then each policy's overall line counts all 10 runs, and the optimum's ratio is 1
    overall = {o["policy"]: o for o in answer["overall"]}
    assert all(o["runs"] == 10 for o in overall.values())
    assert overall["optimum"]["cost_ratio_to_optimum"] == pytest.approx(1.0)
    assert overall["spotrun"]["deadlines_met"] == 10

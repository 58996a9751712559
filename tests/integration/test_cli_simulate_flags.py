"""Each job flag of ``spotrun simulate`` reaches the replay: changing it changes the results, not only the echo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from spotrun.cli.app import app
from spotrun.model.simulation.traces import dumps_trace

JOB = ["--work-hours", "6", "--deadline-hours", "10", "--starts", "5"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Spot 5 hours in 6, preempted at each gap: every policy's figures depend on every job parameter.
    root = tmp_path_factory.mktemp("traces") / "availability"
    root.mkdir()
    (root / "often.json").write_text(dumps_trace(600, ([1] * 30 + [0] * 6) * 8))
    return root.parent


def results(traces: Path, *extra: str) -> list[dict[str, Any]]:
    answer = CliRunner().invoke(app, ["simulate", "--traces", str(traces), *JOB, *extra, "--json"])
    assert answer.exit_code == 0, answer.output
    [trace] = json.loads(answer.stdout)["traces"]
    # The per-policy figures only: what the replay computed, not the parameters it was given
    return [{k: v for k, v in p.items() if k not in ("job", "params")} for p in trace["policies"]]


# A save of 1 minute fits the 2-minute notice: only then does the share of silent preemptions count (a longer
# save makes every preemption lose work, whatever that share).
FITS_THE_NOTICE = ["--checkpoint-minutes", "1"]


@pytest.mark.parametrize(
    ("given", "flag"),
    [
        ([], ["--checkpoint-minutes", "20"]),
        ([], ["--restart-minutes", "90"]),
        ([], ["--interval-minutes", "15"]),
        (FITS_THE_NOTICE, ["--silent-fraction", "1"]),
        ([], ["--spot-price", "2.5"]),
        ([], ["--on-demand-price", "9"]),
        ([], ["--step-minutes", "60"]),
    ],
)
def test_each_job_flag_changes_what_the_replay_computes(
    traces: Path, given: list[str], flag: list[str]
) -> None:
    # Given the results with the defaults (and `given`); When one flag is given another value
    baseline = results(traces, *given)
    changed = results(traces, *given, *flag)
    # Then the replay's figures differ: the flag is used, never accepted and ignored
    assert changed != baseline, flag


def test_the_plot_shows_the_start_asked_for(traces: Path, tmp_path: Path) -> None:
    # Given two plots of the same trace, at start 0 and at start 3
    pytest.importorskip("matplotlib")
    first, later = tmp_path / "first.png", tmp_path / "later.png"
    for path, start in ((first, "0"), (later, "3")):
        answer = CliRunner().invoke(
            app,
            [
                "simulate",
                "--traces",
                str(traces),
                *JOB,
                "--plot",
                str(path),
                "--plot-start",
                start,
                "--plot-trace",
                "availability/often.json",
            ],
        )
        assert answer.exit_code == 0, answer.output
    # Then they differ: --plot-start (and --plot-trace, which names the only trace) reach the picture
    assert first.read_bytes() != later.read_bytes()


def test_an_unknown_plot_trace_is_refused(traces: Path, tmp_path: Path) -> None:
    # Given --plot-trace naming no trace of the directory; When simulate runs, Then it is refused, not ignored
    pytest.importorskip("matplotlib")
    answer = CliRunner().invoke(
        app,
        [
            "simulate",
            "--traces",
            str(traces),
            *JOB,
            "--plot",
            str(tmp_path / "p.png"),
            "--plot-trace",
            "nope.json",
        ],
    )
    assert answer.exit_code != 0
    assert "nope.json" in answer.output


def test_a_manifest_with_work_in_steps_is_replayed_as_such(traces: Path, tmp_path: Path) -> None:
    # Given the same deadline job with its work in steps, and in hours
    base = "name: tiny\ncapacity:\n  deadline: 10h\ntraining:\n  command: [python, t.py]\n"
    in_steps, in_hours = tmp_path / "steps.yaml", tmp_path / "hours.yaml"
    in_steps.write_text(base + "  total_steps: 1000\n")
    in_hours.write_text(base + "  expected_hours: 6\n")
    # When simulate replays each (the steps' hours given by --work-hours)
    jobs = []
    for path in (in_steps, in_hours):
        answer = CliRunner().invoke(
            app,
            ["simulate", "--traces", str(traces), "--manifest", str(path), "--work-hours", "6", "--json"],
        )
        assert answer.exit_code == 0, answer.output
        jobs.append(json.loads(answer.stdout)["job"])
    # Then only the job in steps is replayed with spotrun's rule before an estimate (10 minutes of training)
    assert jobs[0]["estimate_after_hours"] == pytest.approx(10 / 60)
    assert jobs[1]["estimate_after_hours"] is None

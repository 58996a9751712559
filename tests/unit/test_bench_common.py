"""The bench's shared parts: statistics and their format, interleaving, the child's JSON line, the sections."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest

from bench import __main__ as bench_main
from bench.common import (
    MeasurementError,
    child_main,
    config_flags,
    fmt,
    interleaved,
    last_json_line,
    results_readme,
    run_once,
    stats,
    write_result,
)


def test_stats_are_the_median_and_the_range_formatted_median_first():
    # Given four measurements, unordered
    values = [8.8, 7.1, 7.9, 8.1]
    # When they are summarized and formatted
    summary = stats(values)
    # Then the median is the middle of the sorted values (the mean of the two middle ones) and the range spans all
    assert (summary.median, summary.low, summary.high, summary.n) == (8.0, 7.1, 8.8, 4)
    assert fmt(stats([7.9, 7.1, 8.8])) == "7.9 s [7.1\u20138.8]"
    assert fmt(stats([1.234, 1.5]), "\u00d7", 2) == "1.37\u00d7 [1.23\u20131.50]"


def test_stats_of_nothing_is_an_error_not_a_zero():
    # Given no measurements / When summarized / Then it refuses
    with pytest.raises(ValueError, match="no measurements"):
        stats([])


def test_configurations_are_interleaved_a_b_a_b():
    # Given two configurations and three runs / When ordered
    order = list(interleaved(["A", "B"], 3))
    # Then each round runs every configuration once, in turn
    assert order == [(0, "A"), (0, "B"), (1, "A"), (1, "B"), (2, "A"), (2, "B")]


def test_the_result_is_the_last_json_object_line_of_the_output():
    # Given a child's output with log lines, a JSON list and two objects
    out = 'starting\n{"level": "INFO"}\n[1, 2]\n{"result": 1}\nbye\n'
    # When the result is read / Then it is the last object line; no object at all is an error
    assert last_json_line(out) == {"result": 1}
    with pytest.raises(ValueError):
        last_json_line("no json here\n[1]\n")


def test_a_failed_child_is_reported_with_the_tail_of_its_stderr(tmp_path, monkeypatch):
    # Given a module that fails after writing to stderr
    (tmp_path / "failing_bench.py").write_text(
        "import sys\nprint('boom: the reason', file=sys.stderr)\nsys.exit(3)\n"
    )
    monkeypatch.setattr("bench.common.REPO", tmp_path)
    # When it is run as a measurement / Then the error says how it exited and why
    with pytest.raises(MeasurementError, match=r"exited 3:\nboom: the reason"):
        run_once("failing_bench")


def test_a_child_that_prints_no_result_is_an_error(tmp_path, monkeypatch):
    # Given a module that exits 0 without a JSON line
    (tmp_path / "silent_bench.py").write_text("print('done')\n")
    monkeypatch.setattr("bench.common.REPO", tmp_path)
    # When it is run / Then that is a failure, not an empty result
    with pytest.raises(MeasurementError, match="printed no JSON result"):
        run_once("silent_bench")


def test_a_child_gets_once_and_its_arguments_and_its_json_line_is_returned(tmp_path, monkeypatch):
    # Given a module that echoes its arguments as its result
    (tmp_path / "echo_bench.py").write_text(
        "import json, sys\nprint('log')\nprint(json.dumps({'argv': sys.argv[1:]}))\n"
    )
    monkeypatch.setattr("bench.common.REPO", tmp_path)
    # When it is run with arguments / Then it was given --once first and its JSON line comes back
    assert run_once("echo_bench", ["--x", "1"]) == {"argv": ["--once", "--x", "1"]}
    assert sys.executable  # the child runs with this interpreter


def test_a_childs_config_is_the_one_its_parent_wrote_as_flags(capsys):
    # Given a config with every field off its default, written as the parent writes a child's arguments
    @dataclasses.dataclass(frozen=True)
    class Config:
        time_scale: float = 0.05
        steps: int = 10
        label: str = "a"

    sent = Config(time_scale=0.5, steps=7, label="b")
    seen = []

    def measure(config, mode, workdir):
        seen.append((config, mode, workdir.is_dir()))
        return {"steps": config.steps}

    # When the child reads them
    child_main(["--once", "--mode", "y", *config_flags(sent)], Config, ("x", "y"), measure)
    # Then it measures that config in that mode in a scratch directory and prints its JSON line
    assert seen == [(sent, "y", True)]
    assert last_json_line(capsys.readouterr().out) == {"steps": 7}


def test_results_carry_their_commit_and_the_readme_holds_every_section_with_its_own(tmp_path):
    # Given two sections measured at different commits
    write_result(
        {"name": "recovery", "title": "Recovery", "markdown": "| a |", "results": {}}, "abc", False, tmp_path
    )
    write_result(
        {"name": "cold_start", "title": "Cold", "markdown": "| b |", "results": {}}, "def", True, tmp_path
    )
    # When the README is written from what is stored
    stored = bench_main.stored_sections(tmp_path)
    readme = results_readme(stored)
    # Then each JSON file names its commit and dirty flag, and the README shows each section under its commit
    assert json.loads((tmp_path / "recovery.json").read_text())["commit"] == "abc"
    assert [s["name"] for s in stored] == ["recovery", "cold_start"]  # the sections' order, not the files'
    assert "## Recovery\n\nCommit `abc`.\n\n| a |" in readme
    assert "## Cold\n\nCommit `def+dirty`.\n\n| b |" in readme


def test_a_section_heading_stored_in_the_markdown_is_not_shown_twice():
    # Given a document written when sections put their own heading at the top of their markdown
    stored = {"name": "scale", "title": "Scale", "markdown": "## 8 jobs\n\n| c |", "commit": "abc"}
    # When the README is written / Then the section has one heading, the title's
    readme = results_readme([stored])
    assert "## Scale\n\nCommit `abc`.\n\n| c |" in readme
    assert "## 8 jobs" not in readme


def test_only_picks_sections_in_their_order_and_refuses_an_unknown_one():
    # Given --only naming two sections out of order / When chosen / Then they run in the bench's order
    assert bench_main.chosen("simulate,recovery") == ["recovery", "simulate"]
    assert bench_main.chosen(None) == list(bench_main.SECTIONS)
    # And a name that is not a section stops the bench before anything runs
    with pytest.raises(SystemExit, match="unknown section"):
        bench_main.chosen("recovery,nope")


def test_an_absent_section_module_is_skipped_with_a_line_and_the_others_still_run(
    tmp_path, monkeypatch, capsys
):
    # Given a tree without bench/transfers.py and a section that runs
    ran = []

    class Fake:
        @staticmethod
        def run(runs: int) -> dict:
            ran.append(runs)
            return {"name": "simulate", "title": "Sim", "markdown": "table", "results": {}}

    monkeypatch.setattr(bench_main, "section_module", lambda name: {"simulate": Fake}.get(name))
    monkeypatch.setattr(bench_main, "RESULTS", tmp_path)
    # When the bench runs both
    code = bench_main.main(["--only", "transfers,simulate", "--runs", "2"])
    # Then transfers is skipped with a line saying so, simulate ran with --runs, and its results were written
    out = capsys.readouterr().out
    assert code == 0
    assert "== transfers: skipped (no bench/transfers.py in this tree)" in out
    assert ran == [2]
    assert (tmp_path / "simulate.json").is_file()
    assert "## Sim" in (tmp_path / "README.md").read_text()


def test_a_missing_module_is_none_but_a_broken_one_raises(monkeypatch):
    # Given no module bench.no_such_x / When looked up / Then it is absent
    assert bench_main.section_module("no_such_x") is None

    # And a module that exists but fails to import is an error, not a silent skip
    def broken(name: str):
        raise ModuleNotFoundError("No module named 'yaml'", name="yaml")

    monkeypatch.setattr(bench_main.importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError, match="yaml"):
        bench_main.section_module("recovery")

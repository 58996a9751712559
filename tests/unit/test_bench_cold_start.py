"""The cold-start bench: what its probe times, where it imports from, and its per-handler verdict."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from bench.cold_start import handlers, instruction_counts, markdown, measure_import, pairs_for, summarize
from bench.common import MeasurementError
from infra.lambda_env import init_environment
from spotrun.shape import SERVICE_NAME, SHAPE


def test_every_deployed_function_is_measured_once():
    # Given the deployment's functions / When the bench lists its handlers
    listed = handlers()
    # Then each handler is there, once
    assert set(listed) == {spec.handler for spec in SHAPE.functions}
    assert len(listed) == len(set(listed))


def test_the_probe_imports_the_handler_from_the_package_in_a_fresh_interpreter(tmp_path):
    # Given a package holding a handler module that burns some CPU on import
    (tmp_path / "fn.py").write_text("sum(range(3_000_000))\ndef handler(event, context):\n    pass\n")
    # When its import is measured
    result = measure_import(Path(sys.executable), tmp_path, tmp_path, "fn.handler")
    # Then the module came from the package and its wall and CPU time were measured inside the child
    assert result["file"] == str(tmp_path / "fn.py")
    assert 0 < result["seconds"] < 60
    assert 0 < result["cpu"] < 60


def test_the_probe_runs_in_a_functions_init_environment_and_nothing_of_this_process(tmp_path, monkeypatch):
    # Given a handler module that records the environment it was imported in, and a variable of this process
    (tmp_path / "fn.py").write_text(
        "import json, os\nopen('env.json', 'w').write(json.dumps(dict(os.environ)))\nhandler = print\n"
    )
    monkeypatch.setenv("SPOTRUN_BENCH_LEAK", "1")
    # When its import is measured
    measure_import(Path(sys.executable), tmp_path, tmp_path / "tmp", "fn.handler")
    # Then it saw what a deployed function sees at init (tracing on, infra's variables) and nothing else
    seen = json.loads((tmp_path / "env.json").read_text())
    seen.pop("LC_CTYPE", None)  # set by Python itself when it coerces a locale this machine lacks (PEP 538)
    assert seen == init_environment(tmp_path, tmp_path / "tmp", os.environ.get("PATH", ""))
    assert seen["LAMBDA_TASK_ROOT"] == str(tmp_path)
    assert seen["POWERTOOLS_SERVICE_NAME"] == SERVICE_NAME
    assert "SPOTRUN_BENCH_LEAK" not in seen


def test_a_handler_imported_from_outside_the_package_is_refused(tmp_path):
    # Given an empty package, so that `json.dumps` resolves to the interpreter's own json
    # When measured / Then the bench refuses: it would be timing something that is not shipped
    with pytest.raises(MeasurementError, match="not from the package"):
        measure_import(Path(sys.executable), tmp_path, tmp_path, "json.dumps")


def test_a_handler_that_fails_to_import_is_an_error_with_its_reason(tmp_path):
    # Given a handler whose module raises on import
    (tmp_path / "bad.py").write_text("raise RuntimeError('no such setting')\n")
    # When measured / Then the child's error is reported
    with pytest.raises(MeasurementError, match="no such setting"):
        measure_import(Path(sys.executable), tmp_path, tmp_path, "bad.handler")


def _pair(seconds: float, baseline: float, cpu: float, baseline_cpu: float) -> dict[str, float]:
    return {
        "seconds": seconds,
        "baseline": baseline,
        "ratio": seconds / baseline,
        "cpu": cpu,
        "baseline_cpu": baseline_cpu,
        "cpu_ratio": cpu / baseline_cpu,
    }


def test_the_verdict_is_the_median_of_the_paired_cpu_ratios_against_two():
    # Given one handler at 1.5x its paired baselines in CPU (3x in wall time, the machine being busy), and one
    # whose per-pair CPU ratios are 1.5, 2.5 and 2.6 (and whose median import is 2.6x the median baseline)
    samples = {
        "functions.a.handler": [_pair(0.30, 0.1, 0.15, 0.1)] * 3,
        "functions.b.handler": [
            _pair(0.15, 0.1, 0.15, 0.1),
            _pair(0.30, 0.12, 0.30, 0.12),
            _pair(0.26, 0.1, 0.26, 0.1),
        ],
    }
    # When summarized
    results = summarize(samples) | {"python_version": "3.13.0"}
    # Then the verdict is the CPU ratio's: a's wall ratio over two does not fail it
    assert results["verdict_on"] == "cpu_ratio"
    assert results["handlers"]["functions.a.handler"]["met"] is True
    # And b's ratio is the median of its per-pair ratios (not the ratio of the medians), over the target
    assert results["handlers"]["functions.b.handler"]["cpu_ratio"]["median"] == pytest.approx(2.5)
    assert results["handlers"]["functions.b.handler"]["met"] is False
    assert results["all_met"] is False
    table = markdown(results, 3)
    assert (
        "| `functions.a.handler` | 150 ms [150\u2013150] | 100 ms [100\u2013100] | 1.50\u00d7 [1.50\u20131.50] "
        "| 3.00\u00d7 [3.00\u20133.00] | n/a | yes |" in table
    )  # no instruction counts given: n/a
    assert "(over: functions.b.handler)" in table
    assert "CPU ratio" in table
    assert "Python 3.13.0)" in table  # the interpreter the imports ran in, not this process's


def test_each_handler_is_paired_with_a_fresh_baseline_and_its_ratio_is_per_pair(monkeypatch, tmp_path):
    # Given two handlers whose imports take 0.3 s and 0.1 s, and a baseline that slows down from run to run
    import bench.cold_start as cold_start

    calls: list[str] = []
    baselines = iter([0.10, 0.10, 0.20, 0.20])

    pythons: list[Path] = []

    def measured(python, package, tmp, dotted):
        calls.append(dotted)
        pythons.append(python)
        if len(calls) <= 3:  # the uncounted warm-up
            return {"seconds": 9.0, "cpu": 9.0, "file": str(package / "x.py")}
        seconds = next(baselines) if dotted == "boto3" else {"x.handler": 0.3, "y.handler": 0.1}[dotted]
        return {"seconds": seconds, "cpu": seconds / 2, "file": str(package / "x.py")}

    monkeypatch.setattr(cold_start, "handlers", lambda: ["x.handler", "y.handler"])
    monkeypatch.setattr(cold_start, "build_package", lambda out: out)
    monkeypatch.setattr(cold_start, "measure_import", measured)
    monkeypatch.setattr(cold_start, "lambda_python", lambda: Path("/layer-venv/bin/python"))
    monkeypatch.setattr(cold_start, "pairs_for", lambda runs: runs)
    monkeypatch.setattr(cold_start, "interpreter_version", lambda python: f"3.13.0 of {python}")
    counted: list[list[str]] = []

    def instructions(python, package, tmp, names):
        counted.append(names)
        return {"baseline": 600e6, "handlers": {"x.handler": {"instructions": 1200e6, "ratio": 2.0}}}

    monkeypatch.setattr(cold_start, "instruction_counts", instructions)
    # When the section runs two pairs
    section = cold_start.run(2)
    # Then every module is imported once uncounted, and then every handler import follows its own baseline,
    # pair after pair, all in the Lambda layer's interpreter
    assert calls == ["boto3", "x.handler", "y.handler"] + ["boto3", "x.handler", "boto3", "y.handler"] * 2
    assert set(pythons) == {Path("/layer-venv/bin/python")}
    # And each ratio is its import over the baseline it was paired with, the warm-up counted in none
    x = section["results"]["handlers"]["x.handler"]
    assert [p["ratio"] for p in x["samples"]] == pytest.approx([3.0, 1.5])
    assert [p["cpu_ratio"] for p in x["samples"]] == pytest.approx([3.0, 1.5])
    assert section["name"] == "cold_start"
    assert "| `x.handler` |" in section["markdown"]
    # And every handler's instructions are counted once, shown beside its CPU ratio (n/a where none came back)
    assert counted == [["x.handler", "y.handler"]]
    assert section["results"]["instructions"]["baseline"] == 600e6
    assert "| 1,200 M, 2.000\u00d7 | **no** |" in section["markdown"]
    assert "| n/a |" in section["markdown"]  # y
    assert "`import boto3` (600 M)" in section["markdown"]
    # And the table names the layer interpreter's version
    assert "Python 3.13.0 of /layer-venv/bin/python)" in section["markdown"]


def test_the_default_runs_take_five_pairs_per_handler():
    # Given make bench's default of 3 runs / Then each handler gets five pairs: the ratios are noisy
    assert pairs_for(3) == 5


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_instructions_are_counted_for_the_import_alone_against_boto3s(tmp_path):
    # Given a package of two handler modules, one doing ten times the work of the other at import
    (tmp_path / "light.py").write_text("sum(range(20_000))\nhandler = print\n")
    (tmp_path / "heavy.py").write_text("sum(range(200_000))\nhandler = print\n")
    # When their instructions are counted under callgrind
    counted = instruction_counts(Path(sys.executable), tmp_path, tmp_path, ["light.handler", "heavy.handler"])
    # Then each is its import's count less an empty interpreter's, over boto3's import (which does far more)
    assert counted is not None
    light, heavy = counted["handlers"]["light.handler"], counted["handlers"]["heavy.handler"]
    assert 0 < light["instructions"] < heavy["instructions"] < counted["baseline"]
    assert heavy["ratio"] == pytest.approx(heavy["instructions"] / counted["baseline"])
    # and the loop's extra 180,000 additions (some hundred instructions each) are what separates the two
    assert 10e6 < heavy["instructions"] - light["instructions"] < 200e6

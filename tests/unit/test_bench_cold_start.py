"""The cold-start bench: what its probe times, where it imports from, and its per-handler verdict."""

from __future__ import annotations

import pytest

from bench.cold_start import handlers, markdown, measure_import, summarize
from bench.common import MeasurementError
from spotrun.shape import SHAPE


def test_every_deployed_function_is_measured_once():
    # Given the deployment's functions / When the bench lists its handlers
    listed = handlers()
    # Then each handler is there, once
    assert set(listed) == {spec.handler for spec in SHAPE.functions}
    assert len(listed) == len(set(listed))


def test_the_probe_imports_the_handler_from_the_package_in_a_fresh_interpreter(tmp_path):
    # Given a package holding a handler module
    (tmp_path / "fn.py").write_text(
        "import sys\nLOADED_WITH = len(sys.modules)\ndef handler(event, context):\n    pass\n"
    )
    # When its import is measured
    result = measure_import(tmp_path, "fn.handler")
    # Then the module came from the package and a duration was measured inside the child
    assert result["file"] == str(tmp_path / "fn.py")
    assert 0 < result["seconds"] < 60


def test_a_handler_imported_from_outside_the_package_is_refused(tmp_path):
    # Given an empty package, so that `json.dumps` resolves to the interpreter's own json
    # When measured / Then the bench refuses: it would be timing something that is not shipped
    with pytest.raises(MeasurementError, match="not from the package"):
        measure_import(tmp_path, "json.dumps")


def test_a_handler_that_fails_to_import_is_an_error_with_its_reason(tmp_path):
    # Given a handler whose module raises on import
    (tmp_path / "bad.py").write_text("raise RuntimeError('no such setting')\n")
    # When measured / Then the child's error is reported
    with pytest.raises(MeasurementError, match="no such setting"):
        measure_import(tmp_path, "bad.handler")


def test_the_verdict_is_the_median_of_the_paired_ratios_against_two():
    # Given one handler at 1.5x its paired baselines, and one whose per-pair ratios are 1.5, 2.5 and 2.6 (and
    # whose median import is 2.6x the median baseline)
    samples = {
        "functions.a.handler": [{"seconds": 0.15, "baseline": 0.1, "ratio": 1.5}] * 3,
        "functions.b.handler": [
            {"seconds": 0.15, "baseline": 0.1, "ratio": 1.5},
            {"seconds": 0.30, "baseline": 0.12, "ratio": 2.5},
            {"seconds": 0.26, "baseline": 0.1, "ratio": 2.6},
        ],
    }
    # When summarized
    results = summarize(samples)
    # Then b's ratio is the median of its per-pair ratios (not the ratio of the medians), over the target
    assert results["handlers"]["functions.a.handler"]["met"] is True
    assert results["handlers"]["functions.b.handler"]["ratio"]["median"] == 2.5
    assert results["handlers"]["functions.b.handler"]["met"] is False
    assert results["all_met"] is False
    table = markdown(results, 3)
    assert (
        "| `functions.a.handler` | 150 ms [150\u2013150] | 100 ms [100\u2013100] | 1.50\u00d7 [1.50\u20131.50] | yes |"
        in table
    )
    assert "(over: functions.b.handler)" in table


def test_each_handler_is_paired_with_a_fresh_baseline_and_its_ratio_is_per_pair(monkeypatch, tmp_path):
    # Given two handlers whose imports take 0.3 s and 0.1 s, and a baseline that slows down from run to run
    import bench.cold_start as cold_start

    calls: list[str] = []
    baselines = iter([0.10, 0.10, 0.20, 0.20])

    def measured(package, dotted):
        calls.append(dotted)
        seconds = next(baselines) if dotted == "boto3" else {"x.handler": 0.3, "y.handler": 0.1}[dotted]
        return {"seconds": seconds, "file": str(package / "x.py")}

    monkeypatch.setattr(cold_start, "handlers", lambda: ["x.handler", "y.handler"])
    monkeypatch.setattr(cold_start, "build_package", lambda out: out)
    monkeypatch.setattr(cold_start, "measure_import", measured)
    # When the section runs twice
    section = cold_start.run(2)
    # Then every handler import follows its own baseline, round after round
    assert calls == ["boto3", "x.handler", "boto3", "y.handler"] * 2
    # And each ratio is its import over the baseline it was paired with
    x = section["results"]["handlers"]["x.handler"]
    assert [p["ratio"] for p in x["samples"]] == pytest.approx([3.0, 1.5])
    assert section["name"] == "cold_start"
    assert "| `x.handler` |" in section["markdown"]

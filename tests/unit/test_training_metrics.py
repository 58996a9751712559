"""Training metrics a script reports: checked, appended as JSON lines, rank 0 only, and Trainer's logs picked."""

from __future__ import annotations

import json
import math
import time
from fractions import Fraction
from pathlib import Path

import pytest

from spotrun import training
from spotrun.model.job import telemetry
from spotrun.model.job.telemetry import MetricsLine
from spotrun.training import metrics
from spotrun.training.metrics import metrics_record, trainer_metrics


def run_with_metrics(tmp_path: Path, **environ: str) -> tuple[training.Run, Path]:
    path = tmp_path / "runtime" / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    env = {
        training.ENV_METRICS_FILE: str(path),
        training.ENV_CHECKPOINT_DIR: str(tmp_path / "checkpoints"),
        training.ENV_OUTPUT_DIR: str(tmp_path / "output"),
        **environ,
    }
    return training.Run.from_env(env, handle_signal=False), path


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_report_is_one_json_line_the_model_accepts(tmp_path):
    # Given a run under spotrun
    run, path = run_with_metrics(tmp_path)

    # When the script reports by keyword, by mapping (names that are not identifiers), and without a step
    before = time.time()
    run.report_metrics(10, loss=0.5, accuracy=1)
    run.report_metrics(20, {"eval/loss": 0.25}, lr=Fraction(1, 4))
    run.report_metrics(None, epoch=1.0)
    after = time.time()

    # Then three lines, each stamped with the time of its report, each a report the agent validates
    written = lines(path)
    assert all(before - 0.001 <= line.pop("at") <= after + 0.001 for line in written)
    assert written == [
        {"step": 10, "values": {"loss": 0.5, "accuracy": 1.0}},
        {"step": 20, "values": {"eval/loss": 0.25, "lr": 0.25}},
        {"values": {"epoch": 1.0}},
    ]
    for line in written:
        MetricsLine.model_validate({"at": "2026-01-01T00:00:00Z", **line})
    assert path.read_bytes().endswith(b"\n")


@pytest.mark.parametrize(
    ("step", "values", "message"),
    [
        (1, {}, "no values given"),
        (-1, {"loss": 1.0}, "non-negative integer"),
        (True, {"loss": 1.0}, "non-negative integer"),
        (1.5, {"loss": 1.0}, "non-negative integer"),
        (1, {"loss": math.nan}, "loss is nan, not a finite number"),
        (1, {"loss": math.inf}, "not a finite number"),
        (1, {"loss": "0.4"}, "loss must be a real number, not str"),
        (1, {"ok": True}, "ok must be a real number, not bool"),
        (1, {"bad name": 1.0}, "metric name 'bad name'"),
        (1, {"x" * 65: 1.0}, "must be 1 to 64"),
        (1, {f"m{i}": 1.0 for i in range(33)}, "33 names in one report, at most 32"),
    ],
)
def test_a_bad_report_is_refused_with_what_is_wrong_and_nothing_is_written(tmp_path, step, values, message):
    # Given a run under spotrun
    run, path = run_with_metrics(tmp_path)

    # When / Then
    with pytest.raises(ValueError, match=message):
        run.report_metrics(step, values)
    assert not path.exists()


def test_a_tensor_is_refused_with_the_hint_to_take_its_item(tmp_path):
    # Given something with .item(), as a 0-d tensor has
    class Scalar:
        def item(self) -> float:
            return 0.5

    run, _ = run_with_metrics(tmp_path)

    # When / Then
    with pytest.raises(ValueError, match=r"not Scalar \(a tensor\? pass \.item\(\)\)"):
        run.report_metrics(1, loss=Scalar())


def test_without_spotrun_reports_are_checked_and_go_nowhere(tmp_path, monkeypatch):
    # Given a run on its own (no SPOTRUN_METRICS_FILE)
    monkeypatch.chdir(tmp_path)
    run = training.Run.from_env({}, handle_signal=False)

    # When it reports / Then nothing is written, but a bad report still fails where its author sees it
    run.report_metrics(1, loss=0.5)
    assert run.metrics_file is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "output"]
    with pytest.raises(ValueError, match="finite"):
        run.report_metrics(1, loss=math.nan)


def test_under_torchrun_only_global_rank_0_writes(tmp_path):
    # Given rank 0 and rank 1 of a torchrun group, both told the node's metrics file
    rank0, path = run_with_metrics(tmp_path, RANK="0")
    rank1, _ = run_with_metrics(tmp_path, RANK="1")

    # When both report
    rank0.report_metrics(5, loss=0.1)
    rank1.report_metrics(5, loss=0.2)

    # Then the file holds rank 0's report only
    assert [{k: v for k, v in line.items() if k != "at"} for line in lines(path)] == [
        {"step": 5, "values": {"loss": 0.1}}
    ]
    assert rank1.metrics_file is None


def test_an_unwritable_metrics_file_is_said_once_and_training_goes_on(tmp_path, capsys):
    # Given a metrics file whose directory does not exist
    run = training.Run(
        tmp_path, tmp_path, tmp_path, tmp_path, metrics_file=tmp_path / "missing" / "metrics.jsonl"
    )

    # When the script reports twice
    run.report_metrics(1, loss=1.0)
    run.report_metrics(2, loss=0.9)

    # Then one warning on stderr, no exception
    assert capsys.readouterr().err.count("cannot write metrics") == 1


def test_the_scripts_rules_are_the_telemetry_models():
    # Given / When / Then: a name or a count the script accepts is one the model keeps
    assert metrics.MAX_METRIC_NAMES == telemetry.MAX_METRIC_NAMES
    assert metrics.MAX_METRIC_NAME_LENGTH == telemetry.MAX_METRIC_NAME_LENGTH
    pattern = next(m.pattern for m in telemetry.MetricName.__metadata__[0].metadata if hasattr(m, "pattern"))
    assert pattern == metrics.METRIC_NAME_PATTERN


def test_trainers_logs_keep_the_curve_and_the_evaluations():
    # Given a training log, an evaluation log and the end-of-training summary, as Trainer.log passes them
    step_log = {"loss": 0.69, "grad_norm": 1.5, "learning_rate": 5e-05, "epoch": 0.5}
    eval_log = {"eval_loss": 0.4, "eval_accuracy": 0.9, "eval_runtime": 1.2, "epoch": 1.0}
    summary = {"train_runtime": 12.0, "train_loss": 0.5, "total_flos": 1e12, "epoch": 1.0}

    # When / Then
    assert trainer_metrics(step_log) == step_log
    assert trainer_metrics(eval_log) == eval_log
    assert trainer_metrics(summary) == {"epoch": 1.0}
    # and what is not a finite number, or not a name of a metric, is left out
    assert trainer_metrics({"loss": math.nan, "eval_note": "x", "eval_ok": True, "eval_a b": 1.0}) == {}
    assert metrics_record(3, trainer_metrics(step_log))["step"] == 3

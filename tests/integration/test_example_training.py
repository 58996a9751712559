"""The tiny-regression example, run directly: deterministic, and resumable bit for bit after SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spotrun.model.manifest.parse import parse_manifest_text

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tiny-regression"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("tiny") / "data"
    subprocess.run(
        [sys.executable, str(EXAMPLE / "generate_data.py"), str(directory)], check=True, capture_output=True
    )
    return directory


def train_command(data_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, str(EXAMPLE / "train.py"), "--data-dir", str(data_dir), *extra]


def environment() -> dict[str, str]:
    # Run as a user would, outside spotrun: none of its variables, the repository importable.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTRUN_")}
    return {**env, "PYTHONPATH": str(REPO)}


def train(data_dir: Path, workdir: Path) -> bytes:
    workdir.mkdir(parents=True, exist_ok=True)
    subprocess.run(train_command(data_dir), cwd=workdir, env=environment(), check=True, capture_output=True)
    return (workdir / "output" / "model.npy").read_bytes()


def test_generated_data_is_byte_identical_for_one_seed(data_dir, tmp_path):
    # Given / When the data is generated again
    subprocess.run(
        [sys.executable, str(EXAMPLE / "generate_data.py"), str(tmp_path)], check=True, capture_output=True
    )

    # Then
    for name in ("features.npy", "targets.npy"):
        assert (tmp_path / name).read_bytes() == (data_dir / name).read_bytes()


def test_two_runs_write_byte_identical_models(data_dir, tmp_path):
    # Given / When the example runs twice from scratch
    first = train(data_dir, tmp_path / "one")
    second = train(data_dir, tmp_path / "two")

    # Then
    assert first == second
    assert len(first) > 128


def test_a_run_stopped_by_sigterm_then_resumed_matches_an_uninterrupted_run(data_dir, tmp_path):
    # Given an uninterrupted run's model, and a slowed-down run in another directory
    expected = train(data_dir, tmp_path / "straight")
    workdir = tmp_path / "interrupted"
    workdir.mkdir()
    child = subprocess.Popen(
        train_command(data_dir, "--step-seconds", "0.01"),
        cwd=workdir,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    # When it gets SIGTERM after its first periodic checkpoint
    assert child.stdout is not None
    lines = [child.stdout.readline()]
    # (run directly, the contract's default interval applies: 100 steps)
    assert lines[0].startswith("step 100 "), lines
    child.send_signal(signal.SIGTERM)
    output = "".join(lines) + child.stdout.read()
    status = child.wait(timeout=30)

    # Then it saved the current step and exited as preempted, without a model
    assert status == 128 + signal.SIGTERM, output
    assert not (workdir / "output" / "model.npy").exists()
    saved = sorted(p.name for p in (workdir / "checkpoints").iterdir())
    last_step = int(saved[-1].removeprefix("step-"))
    # The signal may land right after the step-100 save, which is then the current state; never later than 300.
    assert 100 <= last_step < 300
    assert f"checkpoint signal: saved step {last_step}, exiting" in output

    # When it runs again in the same directory
    resumed = subprocess.run(
        train_command(data_dir), cwd=workdir, env=environment(), capture_output=True, text=True
    )

    # Then it resumed from that checkpoint and wrote the same bytes
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from step {last_step}" in resumed.stdout
    assert (workdir / "output" / "model.npy").read_bytes() == expected


def test_the_example_manifest_is_valid():
    # Given / When
    manifest = parse_manifest_text((EXAMPLE / "manifest.yaml").read_bytes())

    # Then it says what the example needs
    assert manifest.name == "tiny-regression"
    assert manifest.resources.gpu_names == ["t4", "a10g", "l4"]
    assert manifest.data.inputs[0].source == "s3://spotrun-jobs-local/examples/tiny-regression/data/"
    assert manifest.training.code == "s3://spotrun-jobs-local/examples/tiny-regression/code/"
    assert manifest.training.command == ["python", "train.py", "--step-seconds", "0.02"]
    assert manifest.training.checkpoint.interval_steps == 50
    assert manifest.outputs.model == "model.npy"
    assert manifest.archive.storage_class == "GLACIER"


def test_under_spotrun_the_example_reports_its_loss_every_step_and_its_full_data_loss(data_dir, tmp_path):
    # Given the example run with the agent's metrics file
    metrics = tmp_path / "metrics.jsonl"
    env = {**environment(), "SPOTRUN_METRICS_FILE": str(metrics)}

    # When it trains its 300 steps
    subprocess.run(
        train_command(data_dir, "--steps", "300"), cwd=tmp_path, env=env, check=True, capture_output=True
    )

    # Then each step's loss is a report, and the last report is the full-data loss
    reports = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in reports[:-1]] == list(range(1, 301))
    assert all(set(r["values"]) == {"loss"} for r in reports[:-1])
    assert reports[-1]["step"] == 300
    assert set(reports[-1]["values"]) == {"full_data_loss"}
    assert reports[-1]["values"]["full_data_loss"] < reports[0]["values"]["loss"]

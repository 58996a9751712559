"""The PyTorch example's metrics under spotrun: every step's loss and the held-out accuracy, from rank 0 only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spotrun.shape import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "pytorch-digits" / "train.py"


def reports_of(launcher: list[str], tmp_path: Path) -> list[dict]:
    """Run the example for 6 steps with the agent's metrics file; the reports it holds."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    metrics = tmp_path / "metrics.jsonl"
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPOTRUN_")}
    env.update({"PYTHONPATH": str(REPO_ROOT), "SPOTRUN_METRICS_FILE": str(metrics), "OMP_NUM_THREADS": "1"})
    subprocess.run(
        [*launcher, str(EXAMPLE), "--max-steps", "6", "--batch-size", "16"],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
    )
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def test_under_torchrun_the_example_reports_each_steps_loss_and_its_accuracy_once(tmp_path):
    # Given the example as two torchrun ranks sharing the node's metrics file
    launcher = [str(Path(sys.executable).parent / "torchrun"), "--nproc-per-node", "2"]

    # When it trains 6 steps
    reports = reports_of(launcher, tmp_path)

    # Then one loss per step (rank 0's only), then the held-out accuracy
    assert [(r["step"], set(r["values"])) for r in reports] == [
        *((step, {"loss"}) for step in range(1, 7)),
        (6, {"accuracy"}),
    ]
    assert 0 <= reports[-1]["values"]["accuracy"] <= 1

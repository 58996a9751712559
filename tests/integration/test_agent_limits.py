"""The train step's limits in the agent: a budget deadline and the remaining runtime allowance stop the example
as an interruption notice would, with its checkpoint committed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from spotrun.agent import checkpoint_store
from spotrun.agent.step_runner import EXIT_REPORTED, execute
from spotrun.model import layout
from tests.integration.test_agent import (
    BUCKET,
    EXAMPLE,
    command,
    context,
    failure_of,
    manifest,
    success_of,
    upload_example,
)

# About 10 s of training for the whole run: the limits below stop it long before it ends.
SLOW = ["--step-seconds", "0.02", "--steps", "500"]


@pytest.fixture
def staged(s3, tmp_path_factory) -> Callable[[Path], None]:
    data = tmp_path_factory.mktemp("data")
    subprocess.run([sys.executable, str(EXAMPLE / "generate_data.py"), str(data)], check=True)
    upload_example(s3, data)

    def stage(nvme_root: Path) -> None:
        ctx = context(s3, nvme_root)
        assert execute(command("stage", manifest()), ctx) == EXIT_REPORTED
        success_of(ctx)

    return stage


def test_the_budget_deadline_checkpoints_and_reports_budget_exceeded(s3, tmp_path, staged):
    # Given the example staged, and a budget that runs out 3 s into the train step (time to start, under load)
    nvme = tmp_path / "nvme"
    staged(nvme)
    ctx = context(s3, nvme)
    stop_at = datetime.now(UTC) + timedelta(seconds=3)
    train = command("train", manifest(command=[sys.executable, "train.py", *SLOW]), stop_at=stop_at)

    # When the train step runs
    status = execute(train, ctx)

    # Then the command got the checkpoint signal, and Budget.Exceeded came with the committed checkpoint
    error, cause = failure_of(ctx)
    assert status == EXIT_REPORTED
    assert error == "Budget.Exceeded"
    assert "budget.max_usd" in cause.message
    assert cause.checkpoint_step is not None
    assert 0 < cause.checkpoint_step < 500
    latest = checkpoint_store.latest_committed(s3, BUCKET, "j-000000000001")
    assert latest is not None
    assert latest.step == cause.checkpoint_step
    assert cause.checkpoint == layout.checkpoint_prefix("j-000000000001", cause.checkpoint_step)
    log = layout.NvmeLayout(nvme, "j-000000000001").log_file(1).read_text()
    assert "sending SIGTERM" in log


def test_the_remaining_runtime_allowance_checkpoints_and_reports_max_runtime_exceeded(s3, tmp_path, staged):
    # Given the example staged, and 3 s left of the job's max_runtime_minutes
    nvme = tmp_path / "nvme"
    staged(nvme)
    ctx = context(s3, nvme)
    train = command("train", manifest(command=[sys.executable, "train.py", *SLOW]), max_runtime_seconds=3)

    # When the train step runs
    execute(train, ctx)

    # Then it stopped with Training.MaxRuntimeExceeded and its checkpoint committed
    error, cause = failure_of(ctx)
    assert error == "Training.MaxRuntimeExceeded"
    assert cause.checkpoint_step is not None
    assert 0 < cause.checkpoint_step < 500
    latest = checkpoint_store.latest_committed(s3, BUCKET, "j-000000000001")
    assert latest is not None
    assert latest.step == cause.checkpoint_step


def test_a_job_resumed_from_one_stopped_at_its_limit_starts_from_its_committed_checkpoint(
    s3, tmp_path, staged
):
    # Given job j-000000000001 stopped at its budget, with a checkpoint committed
    nvme = tmp_path / "nvme"
    staged(nvme)
    stopped = command(
        "train",
        manifest(command=[sys.executable, "train.py", *SLOW]),
        stop_at=datetime.now(UTC) + timedelta(seconds=3),
    )
    execute(stopped, context(s3, nvme))
    latest = checkpoint_store.latest_committed(s3, BUCKET, "j-000000000001")
    assert latest is not None
    # When a new job j-000000000002 naming it in training.resume_from is staged on another instance
    ctx = context(s3, tmp_path / "other-nvme")
    execute(command("stage", manifest(resume_from="j-000000000001"), job_id="j-000000000002"), ctx)

    # Then the new job's checkpoint directory holds the first job's latest checkpoint, and the result says where
    result = success_of(ctx)
    assert result["restored_step"] == latest.step
    assert result["checkpoint_restored"] == layout.checkpoint_prefix("j-000000000001", latest.step)
    local = layout.local_checkpoints(
        layout.NvmeLayout(tmp_path / "other-nvme", "j-000000000002").checkpoint_dir
    )
    assert [step for step, _ in local] == [latest.step]


def test_resuming_from_a_job_without_a_committed_checkpoint_fails_staging_with_its_name(s3, tmp_path, staged):
    # Given no checkpoint of job j-000000000009
    staged(tmp_path / "nvme")
    ctx = context(s3, tmp_path / "other-nvme")
    # When a job resuming from it is staged
    execute(command("stage", manifest(resume_from="j-000000000009"), job_id="j-000000000002"), ctx)
    # Then staging fails and says which job has no checkpoint
    error, cause = failure_of(ctx)
    assert error == "Staging.Failed"
    assert "training.resume_from: job 'j-000000000009' has no committed checkpoint" in cause.message

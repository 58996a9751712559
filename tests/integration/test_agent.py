"""The agent against moto S3: staging, checkpoints, and whole stage / train steps running real commands."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from spotrun.agent import checkpoint_store
from spotrun.agent.imds import ImdsClient
from spotrun.agent.reporter import RecordingReporter
from spotrun.agent.step_context import StepContext
from spotrun.agent.step_runner import EXIT_ABANDONED, EXIT_REPORTED, execute
from spotrun.agent.supervision.spot_notices import ImdsNotices, NoticeWatcher
from spotrun.model import layout
from spotrun.model.agent_protocol.command import AgentCommand, FailureCause
from spotrun.model.manifest.parse import parse_manifest_document
from tests.integration.conftest import AGENT_BUCKET as BUCKET
from tests.integration.conftest import EXAMPLE, REPO  # noqa: F401 - the other agent tests import REPO from here

REGION = "us-east-1"
TOKEN = "secret-task-token-do-not-log"
REPORT_URL = "http://127.0.0.1:9/agent/reports"  # in-process steps report to a RecordingReporter instead


# -- fixtures ----------------------------------------------------------------------------------------------


# -- helpers -----------------------------------------------------------------------------------------------


def manifest(**training: Any) -> dict[str, Any]:
    return {
        "name": "tiny-regression",
        "data": {"inputs": [{"source": f"s3://{BUCKET}/ex/data/", "destination": "."}]},
        "training": {
            "code": f"s3://{BUCKET}/ex/code/",
            "command": [sys.executable, "train.py"],
            "checkpoint": {"interval_steps": 50, "keep_last": 2},
            **training,
        },
        "outputs": {"model": "model.npy"},
    }


def command(
    step: str, document: dict[str, Any], *, job_id: str = "j-000000000001", attempt: int = 1, **extra: Any
) -> AgentCommand:
    return AgentCommand(
        step=step,  # type: ignore[arg-type]
        job_id=job_id,
        attempt=attempt,
        report_url=extra.pop("report_url", REPORT_URL),
        region=REGION,
        jobs_bucket=BUCKET,
        manifest=parse_manifest_document(document),
        heartbeat_seconds=0.2,
        poll_seconds=0.1,
        **extra,
    )


def context(s3: Any, nvme_root: Path, watcher: NoticeWatcher | None = None) -> StepContext:
    return StepContext(
        s3=s3,
        reporter=RecordingReporter(),
        nvme_root=nvme_root,
        base_env=dict(os.environ),  # no PYTHONPATH: the agent's runtime copy must provide spotrun.training
        watcher=watcher or NoticeWatcher(None, 0.1),
        workers=4,
    )


def upload_example(s3: Any, data_dir: Path) -> None:
    for path in sorted(data_dir.iterdir()):
        s3.put_object(
            Bucket=BUCKET, Key=f"ex/data/{path.name}", Body=path.read_bytes(), ChecksumAlgorithm="SHA256"
        )
    s3.put_object(Bucket=BUCKET, Key="ex/code/train.py", Body=(EXAMPLE / "train.py").read_bytes())


def object_bytes(s3: Any, key: str) -> bytes:
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def write_checkpoint(directory: Path, step: int, payload: bytes) -> Path:
    path = directory / layout.checkpoint_name(step)
    (path / "sub").mkdir(parents=True)
    (path / "weights.bin").write_bytes(payload)
    (path / "sub" / "meta.json").write_text(json.dumps({"step": step}))
    return path


def failure_of(ctx: StepContext) -> tuple[str, FailureCause]:
    reporter = ctx.reporter
    assert isinstance(reporter, RecordingReporter)
    assert reporter.success is None, reporter.success
    assert reporter.failure is not None
    return reporter.failure


def success_of(ctx: StepContext) -> dict[str, Any]:
    reporter = ctx.reporter
    assert isinstance(reporter, RecordingReporter)
    assert reporter.failure is None, reporter.failure
    assert reporter.success is not None
    return reporter.success


# -- the stage step ----------------------------------------------------------------------------------------


def test_stage_copies_inputs_and_code_and_restores_the_latest_checkpoint(s3, tmp_path, example_data):
    # Given data, code, a single-object input, and a committed checkpoint of the job
    upload_example(s3, example_data)
    s3.put_object(Bucket=BUCKET, Key="ex/extra/labels.csv", Body=b"a,b\n")
    checkpoint_store.upload_checkpoint(
        s3, BUCKET, "j-000000000001", 100, write_checkpoint(tmp_path / "old", 100, b"w")
    )
    document = manifest()
    document["data"]["inputs"] = [
        {"source": f"s3://{BUCKET}/ex/data/", "destination": "train"},
        {"source": f"s3://{BUCKET}/ex/extra/labels.csv", "destination": "meta/"},
    ]
    ctx = context(s3, tmp_path / "nvme")

    # When the stage step runs
    status = execute(command("stage", document), ctx)

    # Then everything is in place and reported
    result = success_of(ctx)
    job = layout.NvmeLayout(tmp_path / "nvme", "j-000000000001")
    assert status == EXIT_REPORTED
    assert (job.data_dir / "train" / "features.npy").read_bytes() == (
        example_data / "features.npy"
    ).read_bytes()
    assert (job.data_dir / "meta" / "labels.csv").read_bytes() == b"a,b\n"
    assert (job.code_dir / "train.py").is_file()
    assert (job.checkpoint_dir / "step-000000000100" / "weights.bin").read_bytes() == b"w"
    assert result["files"] == 2 + 1 + 1 + 2
    assert result["checkpoint_restored"] == "jobs/j-000000000001/checkpoints/step-000000000100/"
    assert result["restored_step"] == 100
    assert ctx.reporter.heartbeats >= 1  # type: ignore[attr-defined]


def test_stage_reports_staging_failed_when_an_input_is_missing(s3, tmp_path):
    # Given a manifest whose data prefix holds nothing
    ctx = context(s3, tmp_path / "nvme")

    # When
    status = execute(command("stage", manifest()), ctx)

    # Then
    error, cause = failure_of(ctx)
    assert status == EXIT_REPORTED
    assert error == "Staging.Failed"
    assert "no object under" in cause.message


# -- the train step ----------------------------------------------------------------------------------------


def test_train_runs_the_example_uploads_checkpoints_and_reports_the_model(
    s3, tmp_path, example_data, reference_model
):
    # Given a staged job
    upload_example(s3, example_data)
    document = manifest(command=[sys.executable, "train.py", "--step-seconds", "0.004"])
    assert execute(command("stage", document), context(s3, tmp_path / "nvme")) == EXIT_REPORTED
    ctx = context(s3, tmp_path / "nvme")

    # When the train step runs
    status = execute(command("train", document), ctx)

    # Then the model is the deterministic one, uploaded, with its digest reported
    result = success_of(ctx)
    model = object_bytes(s3, "jobs/j-000000000001/output/model.npy")
    assert status == EXIT_REPORTED
    assert model == reference_model
    assert result["model_key"] == "jobs/j-000000000001/output/model.npy"
    assert result["model_sha256"] == hashlib.sha256(model).hexdigest()
    # and the list of outputs is in S3, the result carrying only its key, count and size
    assert result["outputs"] == {
        "key": "jobs/j-000000000001/agent/attempt-001-outputs.json",
        "count": 1,
        "bytes": len(model),
    }
    assert json.loads(object_bytes(s3, result["outputs"]["key"])) == [
        {"key": "jobs/j-000000000001/output/model.npy", "size": len(model), "sha256": result["model_sha256"]}
    ]
    # and the checkpoints were committed as they appeared, pruned to keep_last (2). Each sync uploads the newest
    # complete checkpoint only (agent/sync.py), so which earlier step survives beside 300 depends on the timing.
    assert result["last_checkpoint_step"] == 300
    remaining = checkpoint_store.list_checkpoints(s3, BUCKET, "j-000000000001")
    assert [c.committed for c in remaining] == [True, True]
    assert remaining[-1].step == 300
    assert remaining[0].step in range(50, 300, 50)
    # and the log holds the script's output
    log = object_bytes(s3, result["log_key"]).decode()
    assert "step 300 loss" in log
    assert ctx.reporter.heartbeats >= 1  # type: ignore[attr-defined]


def test_a_failing_command_is_restarted_then_reported_with_its_exit_code_and_log_tail(s3, tmp_path):
    # Given a command that always exits 3, with one restart allowed
    document = manifest(
        command=[sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"], restarts_on_error=1
    )
    del document["training"]["code"]
    document["data"]["inputs"] = []
    ctx = context(s3, tmp_path / "nvme")

    # When the train step runs
    status = execute(command("train", document), ctx)

    # Then it ran twice and the failure carries what a human needs
    error, cause = failure_of(ctx)
    assert status == EXIT_REPORTED
    assert error == "Training.Failed"
    assert cause.exit_code == 3
    assert cause.log_tail is not None
    assert "boom" in cause.log_tail.splitlines()
    assert "after 2 run(s)" in cause.message
    assert cause.log_key == "jobs/j-000000000001/logs/attempt-001.log"
    assert object_bytes(s3, cause.log_key).decode().splitlines().count("boom") == 2


def test_a_command_over_its_time_limit_is_stopped_and_reported_as_max_runtime_exceeded(s3, tmp_path):
    # Given a command that ignores signals' meaning and would sleep for a minute, and a half-second limit
    document = manifest(command=[sys.executable, "-c", "import time; time.sleep(60)"])
    del document["training"]["code"]
    document["data"]["inputs"] = []
    ctx = context(s3, tmp_path / "nvme")
    started = time.monotonic()

    # When
    execute(command("train", document, max_runtime_seconds=0.5, stop_grace_seconds=2.0), ctx)

    # Then it was stopped within the grace and the job is told its allowance is used up
    error, cause = failure_of(ctx)
    assert time.monotonic() - started < 10
    assert error == "Training.MaxRuntimeExceeded"
    assert "max_runtime_minutes" in cause.message
    assert cause.checkpoint is None


def test_a_command_that_exits_0_without_its_model_fails(s3, tmp_path):
    # Given a command that succeeds but writes nothing
    document = manifest(command=[sys.executable, "-c", "print('done')"])
    del document["training"]["code"]
    document["data"]["inputs"] = []
    ctx = context(s3, tmp_path / "nvme")

    # When
    execute(command("train", document), ctx)

    # Then
    error, cause = failure_of(ctx)
    assert error == "Training.Failed"
    assert "outputs.model" in cause.message


def test_a_spot_notice_commits_the_final_checkpoint_and_the_next_attempt_resumes_identically(
    s3, tmp_path, example_data, reference_model, imds
):
    # Given a staged job on an instance whose IMDS will announce an interruption once training checkpointed
    upload_example(s3, example_data)
    document = manifest(command=[sys.executable, "train.py", "--step-seconds", "0.01"])
    execute(command("stage", document), context(s3, tmp_path / "nvme-1"))
    watcher = NoticeWatcher(ImdsNotices(ImdsClient(imds.endpoint)), 0.1)
    ctx = context(s3, tmp_path / "nvme-1", watcher)
    local_checkpoints = layout.NvmeLayout(tmp_path / "nvme-1", "j-000000000001").checkpoint_dir

    def announce_after_first_checkpoint() -> None:
        deadline = time.monotonic() + 20
        while not layout.local_checkpoints(local_checkpoints) and time.monotonic() < deadline:
            time.sleep(0.02)
        imds.set_instance_action(seconds_from_now=5)

    threading.Thread(target=announce_after_first_checkpoint, daemon=True).start()

    # When the train step runs
    status = execute(command("train", document), ctx)

    # Then the checkpoint taken on the signal is committed and reported with Spot.Interrupted
    error, cause = failure_of(ctx)
    assert status == EXIT_REPORTED
    assert error == "Spot.Interrupted"
    assert cause.checkpoint_step is not None
    assert 50 <= cause.checkpoint_step < 300
    assert cause.checkpoint == layout.checkpoint_prefix("j-000000000001", cause.checkpoint_step)
    latest = checkpoint_store.latest_committed(s3, BUCKET, "j-000000000001")
    assert latest is not None
    assert latest.step == cause.checkpoint_step
    assert cause.log_tail is not None
    assert "checkpoint signal: saved step" in cause.log_tail

    # When the next attempt runs on a fresh instance (no sleeping this time: it changes nothing but time)
    document = manifest()
    fresh = context(s3, tmp_path / "nvme-2")
    execute(command("stage", document, attempt=2), fresh)
    staged = success_of(fresh)
    resumed = context(s3, tmp_path / "nvme-2")
    execute(command("train", document, attempt=2), resumed)

    # Then it resumed from that checkpoint and produced the same bytes as an uninterrupted run
    assert staged["restored_step"] == cause.checkpoint_step
    assert object_bytes(s3, "jobs/j-000000000001/output/model.npy") == reference_model
    assert (
        f"resumed from step {cause.checkpoint_step}"
        in object_bytes(s3, "jobs/j-000000000001/logs/attempt-002.log").decode()
    )


def test_an_abandoned_task_stops_the_command_and_reports_nothing(s3, tmp_path):
    # Given a workflow that no longer waits for the task (its heartbeats are refused)
    document = manifest(command=[sys.executable, "-c", "import time; time.sleep(60)"])
    del document["training"]["code"]
    document["data"]["inputs"] = []
    ctx = context(s3, tmp_path / "nvme")
    ctx.reporter.abandoned = True  # type: ignore[attr-defined]
    started = time.monotonic()

    # When
    status = execute(command("train", document), ctx)

    # Then the command was stopped and nothing was reported
    assert status == EXIT_ABANDONED
    assert time.monotonic() - started < 10
    assert ctx.reporter.success is None  # type: ignore[attr-defined]
    assert ctx.reporter.failure is None  # type: ignore[attr-defined]

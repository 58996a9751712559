"""The agent against moto S3: staging, checkpoints, and whole stage / train steps running real commands."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from spotrun import checkpoints, layout
from spotrun.agent.command import AgentCommand, FailureCause
from spotrun.agent.context import StepContext
from spotrun.agent.imds import ImdsClient
from spotrun.agent.notices import ImdsNotices, Notice, NoticeWatcher
from spotrun.agent.outputs import log_tail
from spotrun.agent.reporter import RecordingReporter, StepFunctionsReporter, TaskAbandonedError, cause_json
from spotrun.agent.runner import EXIT_ABANDONED, EXIT_REPORTED, execute
from spotrun.agent.supervisor import interruption_grace
from spotrun.manifest_io import parse_manifest_document
from spotrun.staging import StageItem, StagingError, download_verified

REGION = "us-east-1"
BUCKET = "spotrun-jobs-test"
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tiny-regression"
TOKEN = "secret-task-token-do-not-log"


# -- fixtures ----------------------------------------------------------------------------------------------


@pytest.fixture
def s3(monkeypatch) -> Iterator[Any]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture(scope="module")
def example_data(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("example") / "data"
    subprocess.run(
        [sys.executable, str(EXAMPLE / "generate_data.py"), str(directory)], check=True, capture_output=True
    )
    return directory


@pytest.fixture(scope="module")
def reference_model(example_data, tmp_path_factory) -> bytes:
    """model.npy of an uninterrupted run of the example, run directly (no agent)."""
    work = tmp_path_factory.mktemp("reference")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(
        [sys.executable, str(EXAMPLE / "train.py"), "--data-dir", str(example_data)],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
    )
    return (work / "output" / "model.npy").read_bytes()


class FakeImds:
    """IMDSv2 on 127.0.0.1: tokens required, notices 404 until set."""

    def __init__(self) -> None:
        self.tokens: set[str] = set()
        self.documents: dict[str, str] = {
            "/latest/meta-data/instance-id": "i-0123456789abcdef0",
            "/latest/meta-data/instance-type": "g5.xlarge",
            "/latest/meta-data/placement/availability-zone": "us-east-1b",
            "/latest/meta-data/placement/region": "us-east-1",
        }
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                if self.path != "/latest/api/token" or not self.headers.get(
                    "X-aws-ec2-metadata-token-ttl-seconds"
                ):
                    return self._reply(400, "")
                token = f"t{len(fake.tokens)}"
                fake.tokens.add(token)
                return self._reply(200, token)

            def do_GET(self) -> None:
                if self.headers.get("X-aws-ec2-metadata-token") not in fake.tokens:
                    return self._reply(401, "")
                body = fake.documents.get(self.path)
                return self._reply(404, "") if body is None else self._reply(200, body)

            def _reply(self, status: int, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def set_instance_action(self, seconds_from_now: float) -> None:
        when = (datetime.now(UTC) + timedelta(seconds=seconds_from_now)).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.documents["/latest/meta-data/spot/instance-action"] = json.dumps(
            {"action": "terminate", "time": when}
        )


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    fake = FakeImds()
    yield fake
    fake.server.shutdown()


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
    step: str, document: dict[str, Any], *, job_id: str = "j-1", attempt: int = 1, **extra: Any
) -> AgentCommand:
    return AgentCommand(
        step=step,  # type: ignore[arg-type]
        job_id=job_id,
        attempt=attempt,
        task_token=TOKEN,
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


# -- staging and checkpoints in S3 -------------------------------------------------------------------------


def test_objects_uploaded_with_sha256_are_staged_against_that_checksum(s3, tmp_path):
    # Given one object with a SHA-256 checksum and one uploaded the SDK's default way
    s3.put_object(Bucket=BUCKET, Key="in/a.bin", Body=b"a" * 5000, ChecksumAlgorithm="SHA256")
    s3.put_object(Bucket=BUCKET, Key="in/b.bin", Body=b"b" * 5000)

    # When each is staged
    sha = download_verified(s3, StageItem(BUCKET, "in/a.bin", tmp_path / "a.bin"))
    default = download_verified(s3, StageItem(BUCKET, "in/b.bin", tmp_path / "b.bin"))

    # Then the SHA-256 was checked, and the other got the best check available
    assert sha.algorithm == "sha256"
    assert default.algorithm in ("crc32", "md5")
    assert (tmp_path / "a.bin").read_bytes() == b"a" * 5000


def test_checkpoints_are_committed_listed_pruned_and_restored(s3, tmp_path):
    # Given four local checkpoints uploaded in turn, pruning to the newest two
    for step in (50, 100, 150, 200):
        local = write_checkpoint(tmp_path / "local", step, f"weights-{step}".encode())
        checkpoints.upload_checkpoint(s3, BUCKET, "j-1", step, local, attempt=2)
        checkpoints.prune_checkpoints(s3, BUCKET, "j-1", keep_last=2)

    # When the latest is looked up and restored on another machine
    latest = checkpoints.latest_committed(s3, BUCKET, "j-1")
    restored = checkpoints.restore_latest(s3, BUCKET, "j-1", tmp_path / "restore")

    # Then only the newest two remain, and the restore is the committed content
    assert [(c.step, c.committed) for c in checkpoints.list_checkpoints(s3, BUCKET, "j-1")] == [
        (150, True),
        (200, True),
    ]
    assert latest == checkpoints.CommittedCheckpoint(200, "jobs/j-1/checkpoints/step-000000000200/")
    assert restored is not None
    assert restored.path == tmp_path / "restore" / "step-000000000200"
    assert (restored.path / "weights.bin").read_bytes() == b"weights-200"
    assert json.loads((restored.path / "sub" / "meta.json").read_text()) == {"step": 200}
    marker = checkpoints.read_marker(s3, BUCKET, "j-1", 200)
    assert marker.attempt == 2
    assert [f.path for f in marker.files] == ["sub/meta.json", "weights.bin"]


def test_a_checkpoint_without_its_marker_is_never_the_latest(s3, tmp_path):
    # Given a committed step 50, and step 100 whose upload died before the marker
    checkpoints.upload_checkpoint(s3, BUCKET, "j-1", 50, write_checkpoint(tmp_path, 50, b"fifty"))
    s3.put_object(Bucket=BUCKET, Key=layout.checkpoint_prefix("j-1", 100) + "weights.bin", Body=b"half")

    # When the latest is looked up and restored
    latest = checkpoints.latest_committed(s3, BUCKET, "j-1")
    restored = checkpoints.restore_latest(s3, BUCKET, "j-1", tmp_path / "restore")

    # Then step 100 is ignored
    assert latest is not None
    assert latest.step == 50
    assert restored is not None
    assert (restored.path / "weights.bin").read_bytes() == b"fifty"


def test_uploading_a_committed_step_again_replaces_it_as_a_whole(s3, tmp_path):
    # Given step 50 committed with two files
    checkpoints.upload_checkpoint(s3, BUCKET, "j-1", 50, write_checkpoint(tmp_path / "a", 50, b"first"))

    # When step 50 is uploaded again with other content and one file fewer
    again = tmp_path / "b" / layout.checkpoint_name(50)
    again.mkdir(parents=True)
    (again / "weights.bin").write_bytes(b"second")
    checkpoints.upload_checkpoint(s3, BUCKET, "j-1", 50, again)

    # Then a restore gets exactly the new files (the old extra object is not part of the checkpoint)
    restored = checkpoints.download_checkpoint(s3, BUCKET, "j-1", 50, tmp_path / "restore")
    assert sorted(p.name for p in restored.path.rglob("*")) == ["weights.bin"]
    assert (restored.path / "weights.bin").read_bytes() == b"second"


def test_a_checkpoint_deleted_before_its_upload_is_not_committed(s3, tmp_path):
    # Given a checkpoint directory that training already pruned
    gone = tmp_path / layout.checkpoint_name(50)

    # When / Then
    with pytest.raises(checkpoints.CheckpointVanishedError):
        checkpoints.upload_checkpoint(s3, BUCKET, "j-1", 50, gone)
    assert checkpoints.latest_committed(s3, BUCKET, "j-1") is None


def test_a_restore_refuses_an_object_changed_after_its_commit(s3, tmp_path):
    # Given a committed checkpoint whose file was later overwritten in S3 (with a valid S3 checksum)
    checkpoints.upload_checkpoint(s3, BUCKET, "j-1", 50, write_checkpoint(tmp_path, 50, b"fifty"))
    key = layout.checkpoint_prefix("j-1", 50) + "weights.bin"
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"fiftx", ChecksumAlgorithm="SHA256")

    # When / Then the marker's digest catches it, and nothing half-restored is left
    with pytest.raises(StagingError, match="expected digest"):
        checkpoints.download_checkpoint(s3, BUCKET, "j-1", 50, tmp_path / "restore")
    assert list((tmp_path / "restore").iterdir()) == []


# -- the stage step ----------------------------------------------------------------------------------------


def test_stage_copies_inputs_and_code_and_restores_the_latest_checkpoint(s3, tmp_path, example_data):
    # Given data, code, a single-object input, and a committed checkpoint of the job
    upload_example(s3, example_data)
    s3.put_object(Bucket=BUCKET, Key="ex/extra/labels.csv", Body=b"a,b\n")
    checkpoints.upload_checkpoint(s3, BUCKET, "j-1", 100, write_checkpoint(tmp_path / "old", 100, b"w"))
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
    job = layout.NvmeLayout(tmp_path / "nvme", "j-1")
    assert status == EXIT_REPORTED
    assert (job.data_dir / "train" / "features.npy").read_bytes() == (
        example_data / "features.npy"
    ).read_bytes()
    assert (job.data_dir / "meta" / "labels.csv").read_bytes() == b"a,b\n"
    assert (job.code_dir / "train.py").is_file()
    assert (job.checkpoint_dir / "step-000000000100" / "weights.bin").read_bytes() == b"w"
    assert result["files"] == 2 + 1 + 1 + 2
    assert result["checkpoint_restored"] == "jobs/j-1/checkpoints/step-000000000100/"
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
    model = object_bytes(s3, "jobs/j-1/output/model.npy")
    assert status == EXIT_REPORTED
    assert model == reference_model
    assert result["model_key"] == "jobs/j-1/output/model.npy"
    assert result["model_sha256"] == hashlib.sha256(model).hexdigest()
    # and the list of outputs is in S3, the result carrying only its key, count and size
    assert result["outputs"] == {
        "key": "jobs/j-1/agent/attempt-001-outputs.json",
        "count": 1,
        "bytes": len(model),
    }
    assert json.loads(object_bytes(s3, result["outputs"]["key"])) == [
        {"key": "jobs/j-1/output/model.npy", "size": len(model), "sha256": result["model_sha256"]}
    ]
    # and the checkpoints were committed as they appeared, pruned to keep_last
    assert result["last_checkpoint_step"] == 300
    remaining = checkpoints.list_checkpoints(s3, BUCKET, "j-1")
    assert [(c.step, c.committed) for c in remaining] == [(250, True), (300, True)]
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
    assert cause.log_key == "jobs/j-1/logs/attempt-001.log"
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
    local_checkpoints = layout.NvmeLayout(tmp_path / "nvme-1", "j-1").checkpoint_dir

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
    assert cause.checkpoint == layout.checkpoint_prefix("j-1", cause.checkpoint_step)
    latest = checkpoints.latest_committed(s3, BUCKET, "j-1")
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
    assert object_bytes(s3, "jobs/j-1/output/model.npy") == reference_model
    assert (
        f"resumed from step {cause.checkpoint_step}"
        in object_bytes(s3, "jobs/j-1/logs/attempt-002.log").decode()
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


# -- IMDS, the Step Functions adapter, the command line ----------------------------------------------------


def test_imds_client_reads_identity_and_notices_with_a_session_token(imds):
    # Given an IMDS without notices
    client = ImdsClient(imds.endpoint)

    # When / Then
    assert client.instance_id() == "i-0123456789abcdef0"
    assert client.instance_type() == "g5.xlarge"
    assert client.availability_zone() == "us-east-1b"
    assert client.spot_instance_action() is None
    assert client.rebalance_recommendation() is None

    # When notices appear, and the service forgets the session token
    imds.set_instance_action(seconds_from_now=120)
    imds.documents["/latest/meta-data/events/recommendations/rebalance"] = (
        '{"noticeTime": "2024-05-01T12:00:00Z"}'
    )
    imds.tokens.clear()

    # Then a new token is fetched and the notices are parsed
    action = client.spot_instance_action()
    rebalance = client.rebalance_recommendation()
    assert action is not None
    assert action.action == "terminate"
    assert action.time is not None
    assert 100 < (action.time - datetime.now(UTC)).total_seconds() <= 120
    assert rebalance is not None
    assert rebalance.notice_time == datetime(2024, 5, 1, 12, tzinfo=UTC)


def test_step_functions_reporter_maps_errors_without_repeating_the_token():
    # Given a Step Functions client that rejects a heartbeat and a failure report
    client = boto3.client(
        "stepfunctions", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"
    )
    reporter = StepFunctionsReporter(client, TOKEN)
    with Stubber(client) as stub:
        stub.add_client_error("send_task_heartbeat", "TaskTimedOut", f"Task for token {TOKEN} timed out")
        stub.add_client_error("send_task_failure", "ThrottlingException", f"slow down {TOKEN}")
        stub.add_response(
            "send_task_failure",
            {},
            {"taskToken": TOKEN, "error": "Training.Failed", "cause": '{"message":"m","exit_code":3}'},
        )

        # When / Then
        with pytest.raises(TaskAbandonedError) as abandoned:
            reporter.heartbeat()
        with pytest.raises(Exception, match="ThrottlingException") as throttled:
            reporter.fail("Training.Failed", FailureCause(message="m", exit_code=3))
        reporter.fail("Training.Failed", FailureCause(message="m", exit_code=3))
    assert TOKEN not in str(abandoned.value)
    assert TOKEN not in str(throttled.value)
    assert abandoned.value.__cause__ is None
    assert TOKEN not in repr(reporter)


def test_the_command_line_runs_steps_from_s3_and_treats_its_own_sigterm_as_an_interruption(
    tmp_path, example_data
):
    # Given a moto server holding the example and the stage and train commands, as the emulator has them
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        env = {
            **os.environ,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "SPOTRUN_NVME_ROOT": str(tmp_path / "nvme"),
            "SPOTRUN_IMDS_ENDPOINT": "http://127.0.0.1:9",
            "PYTHONPATH": str(REPO),
        }
        client = boto3.client(
            "s3",
            region_name=REGION,
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        client.create_bucket(Bucket=BUCKET)
        upload_example(client, example_data)
        document = manifest(command=[sys.executable, "train.py", "--step-seconds", "0.01"])
        uris = {}
        for step in ("stage", "train"):
            key = layout.agent_command_key("j-1", 1, step)
            client.put_object(Bucket=BUCKET, Key=key, Body=command(step, document).model_dump_json().encode())
            uris[step] = f"s3://{BUCKET}/{key}"

        def agent(step: str) -> subprocess.Popen[str]:
            argv = [sys.executable, "-m", "spotrun.agent", "run", "--command-uri", uris[step]]
            return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        # When the agent runs the stage step as a process
        stage_out, stage_err = agent("stage").communicate(timeout=60)

        # and the train step, and gets SIGTERM once a checkpoint is committed
        trainer = agent("train")
        deadline = time.monotonic() + 30
        while checkpoints.latest_committed(client, BUCKET, "j-1") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        trainer.send_signal(signal.SIGTERM)
        train_out, train_err = trainer.communicate(timeout=60)
        latest = checkpoints.latest_committed(client, BUCKET, "j-1")
    finally:
        server.stop()

    # Then both steps reported, the SIGTERM became Spot.Interrupted with a committed checkpoint
    assert "reported success" in stage_err, stage_err
    assert trainer.returncode == EXIT_REPORTED, train_err
    assert "reported Spot.Interrupted" in train_err
    assert latest is not None
    assert 50 <= latest.step < 300
    assert f"checkpoint step {latest.step} committed" in train_err
    # and the task token never reached the output
    assert TOKEN not in stage_out + stage_err + train_out + train_err


# -- small pure parts of the agent -------------------------------------------------------------------------


def test_a_long_cause_is_shortened_from_the_front_of_its_log_tail():
    # Given a cause whose log tail alone passes Step Functions' limit
    tail = "\n".join(f"line {i}" for i in range(10_000)) + "\nthe last line"
    cause = FailureCause(message="failed", exit_code=1, log_tail=tail)

    # When
    text = cause_json(cause, limit=2000)

    # Then it fits, and keeps the end of the log
    assert len(text) <= 2000
    parsed = FailureCause.model_validate_json(text)
    assert parsed.log_tail is not None
    assert parsed.log_tail.endswith("the last line")
    assert parsed.exit_code == 1
    # and a huge message is cut too
    assert len(cause_json(FailureCause(message='"' * 50_000), limit=2000)) <= 2000


def test_log_tail_keeps_whole_last_lines_within_its_byte_budget(tmp_path):
    # Given a long log
    log = tmp_path / "attempt-001.log"
    log.write_text("".join(f"{i:05d} " + "x" * 200 + "\n" for i in range(500)))

    # When / Then
    tail = log_tail(log, max_lines=40, max_bytes=4096)
    lines = tail.splitlines()
    assert len(tail.encode()) <= 4096
    assert lines[-1].startswith("00499 ")
    assert all(len(line) == 206 for line in lines)  # no line cut in the middle
    assert log_tail(tmp_path / "missing.log") == ""


def test_the_child_gets_part_of_the_time_left_before_termination():
    # Given notices two minutes away, already past, and without a time
    soon = Notice("interruption", "imds", "terminate", datetime.now(UTC) + timedelta(seconds=120))
    past = Notice("interruption", "imds", "terminate", datetime.now(UTC) - timedelta(seconds=5))
    unknown = Notice("interruption", "agent received SIGTERM")

    # When / Then the rest of the window is left for the upload
    assert 70 < interruption_grace(soon) <= 72
    assert interruption_grace(past) == 1.0
    assert interruption_grace(unknown, default=42.0) == 42.0


def test_a_rebalance_recommendation_triggers_one_early_sync_and_an_interruption_stops_polling():
    # Given a notice source that recommends a rebalance twice, then announces an interruption
    notices = iter(
        [
            Notice("rebalance", "test"),
            Notice("rebalance", "test"),
            Notice("interruption", "test", "terminate"),
        ]
    )

    class Source:
        polls = 0

        def poll(self) -> Notice | None:
            Source.polls += 1
            return next(notices, None)

    seen: list[Notice] = []
    watcher = NoticeWatcher(Source(), 0.01, on_rebalance=seen.append)

    # When it polls for a while
    with watcher:
        deadline = time.monotonic() + 5
        while watcher.interruption() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)

    # Then the rebalance was acted on once, and polling ended with the interruption
    assert [n.kind for n in seen] == ["rebalance"]
    interruption = watcher.interruption()
    assert interruption is not None
    assert interruption.kind == "interruption"
    assert Source.polls == 3

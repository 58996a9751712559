"""The agent's adapters: the IMDSv2 client, the reporter on the API's agent route, and the command line on S3."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.credentials import Credentials

from spotrun.agent import checkpoint_store
from spotrun.agent.imds import ImdsClient
from spotrun.agent.reporter import ApiReporter, ReportError, TaskAbandonedError
from spotrun.agent.step_runner import EXIT_REPORTED
from spotrun.control.agent_reports import AgentReport, HeartbeatReport
from spotrun.model import layout
from spotrun.model.agent_protocol.command import FailureCause
from spotrun.model.job.telemetry import GpuLine, GpuReading
from tests.integration.conftest import AGENT_BUCKET as BUCKET
from tests.integration.report_sink import ReportSink
from tests.integration.test_agent import (
    REGION,
    REPO,
    command,
    manifest,
    upload_example,
)


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


def reporter(sink: ReportSink, **options: Any) -> ApiReporter:
    credentials = Credentials("ASIAEXAMPLEKEY000001", "secret", "session-token")
    return ApiReporter(
        sink.url, REGION, lambda: credentials, job_id="j-1", attempt=2, step="train", **options
    )


def test_api_reporter_posts_each_report_signed_for_execute_api():
    # Given the agent route
    with ReportSink() as sink:
        # When the agent sends a heartbeat and a failure
        api = reporter(sink)
        api.heartbeat()
        api.fail("Training.Failed", FailureCause(message="m", exit_code=3))
    # Then each post names the job, attempt and step, and is signed with SigV4 for execute-api
    (beat_headers, beat), (_, failure) = sink.posts
    assert beat == {"job_id": "j-1", "attempt": 2, "step": "train", "kind": "heartbeat"}
    assert failure["kind"] == "failure"
    assert failure["error"] == "Training.Failed"
    assert json.loads(failure["cause"]) == {"message": "m", "exit_code": 3}
    authorization = beat_headers["Authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=ASIAEXAMPLEKEY000001/")
    assert f"/{REGION}/execute-api/aws4_request" in authorization
    assert beat_headers["X-Amz-Security-Token"] == "session-token"


def test_a_heartbeat_carries_the_latest_gpu_sample_as_the_agent_route_reads_it():
    # Given the node's latest sample of its GPUs
    reading = GpuReading(
        index=0, utilization=97.0, memory_used_mib=15000, memory_total_mib=16384, pcie_rx_mib_s=1.5
    )
    line = GpuLine(at=datetime(2026, 12, 1, 12, tzinfo=UTC), gpus=[reading])
    with ReportSink() as sink:
        # When the agent sends a heartbeat with it
        reporter(sink).heartbeat(None, line)
    # Then the body carries it as JSON, and the route's model reads the same sample back
    [(_, beat)] = sink.posts
    assert beat["gpu"] == line.model_dump(mode="json")
    report = AgentReport.model_validate({**beat, "job_id": "tiny-0123456789ab"}).root
    assert isinstance(report, HeartbeatReport)
    assert report.gpu == line


@pytest.mark.parametrize(
    ("status", "error"),
    [(410, TaskAbandonedError), (409, TaskAbandonedError), (403, ReportError)],
    ids=["gone", "not-waited", "refused"],
)
def test_api_reporter_maps_the_routes_refusals(status, error):
    # Given a route that refuses
    with ReportSink() as sink:
        sink.status = status
        # When a heartbeat is sent
        with pytest.raises(error) as raised:
            reporter(sink).heartbeat()
    # Then it is raised as the agent acts on it, once (a refusal is not retried)
    assert type(raised.value) is error
    assert len(sink.posts) == 1


def test_api_reporter_retries_a_throttled_or_failing_route():
    # Given a route that answers 503
    with ReportSink() as sink:
        sink.status = 503
        # When a report is sent
        with pytest.raises(ReportError, match="after 3 tries"):
            reporter(sink, attempts=3, backoff_seconds=0.01).succeed(FailureCause(message="ok"))
    # Then it was tried again before giving up
    assert len(sink.posts) == 3


def test_the_command_line_runs_steps_from_s3_and_treats_its_own_sigterm_as_an_interruption(
    tmp_path, example_data
):
    # Given a moto server holding the example and the stage and train commands, as the emulator has them
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    sink = ReportSink().__enter__()
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
            key = layout.agent_command_key("j-000000000001", 1, step)
            client.put_object(
                Bucket=BUCKET,
                Key=key,
                Body=command(step, document, report_url=sink.url).model_dump_json().encode(),
            )
            uris[step] = f"s3://{BUCKET}/{key}"

        def agent(step: str) -> subprocess.Popen[str]:
            argv = [sys.executable, "-m", "spotrun.agent", "run", "--command-uri", uris[step]]
            return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        # When the agent runs the stage step as a process
        _stage_out, stage_err = agent("stage").communicate(timeout=60)

        # and the train step, and gets SIGTERM once a checkpoint is committed
        trainer = agent("train")
        deadline = time.monotonic() + 30
        while (
            checkpoint_store.latest_committed(client, BUCKET, "j-000000000001") is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        trainer.send_signal(signal.SIGTERM)
        _train_out, train_err = trainer.communicate(timeout=60)
        latest = checkpoint_store.latest_committed(client, BUCKET, "j-000000000001")
    finally:
        server.stop()
        sink.__exit__()

    # Then both steps reported, the SIGTERM became Spot.Interrupted with a committed checkpoint
    assert "reported success" in stage_err, stage_err
    assert trainer.returncode == EXIT_REPORTED, train_err
    assert "reported Spot.Interrupted" in train_err
    assert latest is not None
    assert 50 <= latest.step < 300
    assert f"checkpoint step {latest.step} committed" in train_err
    # and the route got both results
    assert [body["kind"] for _, body in sink.posts if body["kind"] != "heartbeat"] == ["success", "failure"]

"""The agent's adapters: the IMDSv2 client, the Step Functions reporter, and the command line on S3."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime

import boto3
import pytest
from botocore.stub import Stubber

from spotrun.agent import checkpoints
from spotrun.agent.imds import ImdsClient
from spotrun.agent.reporter import StepFunctionsReporter, TaskAbandonedError
from spotrun.agent.runner import EXIT_REPORTED
from spotrun.model import layout
from spotrun.model.command import FailureCause
from tests.integration.conftest import AGENT_BUCKET as BUCKET
from tests.integration.test_agent import (
    REGION,
    REPO,
    TOKEN,
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
            key = layout.agent_command_key("j-000000000001", 1, step)
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
        while (
            checkpoints.latest_committed(client, BUCKET, "j-000000000001") is None
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        trainer.send_signal(signal.SIGTERM)
        train_out, train_err = trainer.communicate(timeout=60)
        latest = checkpoints.latest_committed(client, BUCKET, "j-000000000001")
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

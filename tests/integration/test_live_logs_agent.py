"""The agent's stage and train steps ship the attempt's log live: setup's lines, then the command's, each once."""

from __future__ import annotations

import sys

import boto3

from spotrun.agent.step_runner import EXIT_REPORTED, execute
from spotrun.model import layout
from tests.integration.conftest import AGENT_BUCKET as BUCKET
from tests.integration.conftest import REGION
from tests.integration.test_agent import command, context, manifest, object_bytes, upload_example

JOB = "j-000000000001"


def test_setup_and_training_lines_reach_the_attempts_stream_in_order_and_once(s3, tmp_path, example_data):
    # Given the deployment's log group, and a job with one setup command
    logs = boto3.client("logs", region_name=REGION)
    group = layout.log_group(BUCKET)
    logs.create_log_group(logGroupName=group)
    upload_example(s3, example_data)
    document = manifest(setup=[[sys.executable, "-c", "print('setting up')"]])

    # When the stage step and then the train step run (two agent runs, as SSM starts them)
    for step in ("stage", "train"):
        ctx = context(s3, tmp_path / "nvme")
        ctx.logs = logs
        assert execute(command(step, document), ctx) == EXIT_REPORTED

    # Then the attempt's stream holds the whole log, line for line as uploaded to S3: setup's, then training's
    events = logs.get_log_events(
        logGroupName=group, logStreamName=layout.log_stream(JOB, 1), startFromHead=True
    )
    streamed = [event["message"] for event in events["events"]]
    uploaded = object_bytes(s3, layout.log_key(JOB, 1)).decode().splitlines()
    assert streamed == [line or " " for line in uploaded]
    assert streamed.index("setting up") < streamed.index(next(s for s in streamed if s.startswith("step ")))

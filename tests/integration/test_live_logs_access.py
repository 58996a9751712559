"""The emulator's judge of CloudWatch Logs writes: a job's credentials write its own attempt's stream only."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from spotrun.local import logs_access_patch
from spotrun.local.patches import PatchSet
from spotrun.local.server import ACCOUNT_ID
from spotrun.model.job_access import ceiling_statements, job_session_policy, serialize
from spotrun.model.layout import log_group, log_stream
from spotrun.model.manifest import JobManifest

REGION = "us-east-1"
JOBS = "spotrun-jobs-test"
JOB = "tiny-0123456789ab"
OTHER = "tiny-ba9876543210"
INSTANCE_KEY = "ASIAINSTANCE0000001"
MANIFEST = JobManifest.model_validate({"name": "tiny", "training": {"command": ["python", "train.py"]}})


@pytest.fixture
def judged(aws) -> Iterator[None]:
    patches = PatchSet()
    logs_access_patch.install(patches, lambda key: key == INSTANCE_KEY)
    try:
        yield
    finally:
        patches.undo_all()


def _job_logs_client(attempt: int) -> Any:
    """A logs client with the credentials the API would issue for JOB's attempt ``attempt``."""
    group = log_group(JOBS)
    ceiling = ceiling_statements(
        f"arn:aws:s3:::{JOBS}", log_group_arn=f"arn:aws:logs:{REGION}:{ACCOUNT_ID}:log-group:{group}"
    )
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName=f"job-access-{attempt}", AssumeRolePolicyDocument="{}")["Role"]
    iam.put_role_policy(
        RoleName=role["RoleName"],
        PolicyName="ceiling",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": ceiling}),
    )
    policy = serialize(job_session_policy(JOB, attempt, MANIFEST, jobs_bucket=JOBS))
    found = boto3.client("sts", region_name=REGION).assume_role(
        RoleArn=role["Arn"], RoleSessionName=JOB, Policy=policy
    )["Credentials"]
    return boto3.client(
        "logs",
        region_name=REGION,
        aws_access_key_id=found["AccessKeyId"],
        aws_secret_access_key=found["SecretAccessKey"],
        aws_session_token=found["SessionToken"],
    )


def _code(call: Any) -> str:
    with pytest.raises(ClientError) as raised:
        call()
    return str(raised.value.response["Error"]["Code"])


def test_a_job_writes_its_attempts_stream_and_no_other(judged):
    # Given the deployment's log group, JOB's attempt-1 stream and another job's, opened by the control plane,
    # and JOB's attempt-1 credentials
    group = log_group(JOBS)
    admin = boto3.client("logs", region_name=REGION)
    admin.create_log_group(logGroupName=group)
    for job in (JOB, OTHER):
        admin.create_log_stream(logGroupName=group, logStreamName=log_stream(job, 1))
    logs = _job_logs_client(1)
    event = [{"timestamp": int(time.time() * 1000), "message": "hello"}]

    # When it writes its own stream
    logs.put_log_events(logGroupName=group, logStreamName=log_stream(JOB, 1), logEvents=event)

    # Then the line is there
    own = admin.get_log_events(logGroupName=group, logStreamName=log_stream(JOB, 1))["events"]
    assert [e["message"] for e in own] == ["hello"]

    # And another job's stream is refused as AWS would, and so is creating any stream (judged on the group)
    assert (
        _code(
            lambda: logs.put_log_events(
                logGroupName=group, logStreamName=log_stream(OTHER, 1), logEvents=event
            )
        )
        == "AccessDeniedException"
    )
    assert (
        _code(lambda: logs.create_log_stream(logGroupName=group, logStreamName=log_stream(JOB, 2)))
        == "AccessDeniedException"
    )
    assert admin.get_log_events(logGroupName=group, logStreamName=log_stream(OTHER, 1))["events"] == []
    # and so is the job's next attempt's stream, once there is one
    admin.create_log_stream(logGroupName=group, logStreamName=log_stream(JOB, 2))
    assert (
        _code(
            lambda: logs.put_log_events(logGroupName=group, logStreamName=log_stream(JOB, 2), logEvents=event)
        )
        == "AccessDeniedException"
    )


def test_an_instances_own_role_session_writes_no_stream(judged):
    # Given the log group and a client signed with an instance's own role session
    group = log_group(JOBS)
    boto3.client("logs", region_name=REGION).create_log_group(logGroupName=group)
    instance = boto3.client(
        "logs", region_name=REGION, aws_access_key_id=INSTANCE_KEY, aws_secret_access_key="x"
    )

    # When it creates a stream, Then it is refused
    assert (
        _code(lambda: instance.create_log_stream(logGroupName=group, logStreamName=log_stream(JOB, 1)))
        == "AccessDeniedException"
    )

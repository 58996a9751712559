"""The emulator's judge of CloudWatch Logs writes: a job's credentials write its own attempt's stream only."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from spotrun.local.api.auth import Callers
from spotrun.local.clock import utc_now
from spotrun.local.iam import judge, managed_policies
from spotrun.local.iam.identities import ADMIN_KEYS, Identities
from spotrun.local.iam.roles import INSTANCE_ROLE_NAME, instance_role
from spotrun.local.instances.imds import RoleCredentials
from spotrun.local.patches.reversible import PatchSet
from spotrun.local.server import ACCOUNT_ID
from spotrun.model.agent_protocol.session_policy import ceiling_statements, job_session_policy, serialize
from spotrun.model.layout import log_group, log_stream
from spotrun.model.manifest.schema import JobManifest

REGION = "us-east-1"
JOBS = "spotrun-jobs-test"
JOB = "tiny-0123456789ab"
OTHER = "tiny-ba9876543210"
MOCK_AWS_KEY = "FOOBARKEY"
MANIFEST = JobManifest.model_validate({"name": "tiny", "training": {"command": ["python", "train.py"]}})


@pytest.fixture
def callers(aws) -> Iterator[Callers]:
    """The emulator's judge installed over mock_aws, with the instance role as the runtime provisions it."""
    managed_policies.install(ACCOUNT_ID)
    instance_role(boto3.client("iam", region_name=REGION), ())
    registered = Callers(ACCOUNT_ID)
    patches = PatchSet()
    # mock_aws signs the tests' own clients with its fake keys (moto.core.models.MockAWS): the administrator's here.
    admins = (*ADMIN_KEYS, MOCK_AWS_KEY)
    judge.install(patches, judge.Judge(Identities(registered, utc_now, admin_keys=admins)))
    try:
        yield registered
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


def test_a_job_writes_its_attempts_stream_and_no_other(callers):
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


def test_an_instances_own_role_session_writes_no_stream(callers):
    # Given the log group and a client signed with an instance's own role session (its policies: no logs)
    group = log_group(JOBS)
    boto3.client("logs", region_name=REGION).create_log_group(logGroupName=group)
    issued = RoleCredentials.issue(INSTANCE_ROLE_NAME)
    callers.register_instance("i-0123456789abcdef0", issued)
    instance = boto3.client(
        "logs",
        region_name=REGION,
        aws_access_key_id=issued.access_key_id,
        aws_secret_access_key=issued.secret_access_key,
        aws_session_token=issued.session_token,
    )

    # When it creates a stream, Then it is refused
    assert (
        _code(lambda: instance.create_log_stream(logGroupName=group, logStreamName=log_stream(JOB, 1)))
        == "AccessDeniedException"
    )

"""The emulator's IAM judge (spotrun.local.iam): who may call, what each service answers, and when sessions expire.

The job's session comes from the API's credentials route (the job-access role narrowed by its session policy),
the instance's from its registration, as on a simulated instance; both are judged on their real policies.
"""

from __future__ import annotations

from typing import Any

import boto3
import botocore.exceptions
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.credentials import Credentials

from spotrun.agent.credentials import JobCredentialsSource
from spotrun.local.instances.imds import RoleCredentials
from spotrun.local.runtime import LocalRuntime
from spotrun.model.agent_protocol.api_paths import AGENT_CREDENTIALS_PATH
from spotrun.model.agent_protocol.session_policy import SESSION_SECONDS
from spotrun.model.layout import checkpoints_prefix, log_group, log_stream
from tests.integration.test_secrets_access import REGION, error_code, training_job
from tests.integration.test_secrets_access import runtime as runtime  # the module's emulator

JOB = "job-j-000000000001"
OTHER = "job-k-000000000002"
UNKNOWN = {"aws_access_key_id": "AKIAIOSFODNN7EXAMPLE", "aws_secret_access_key": "x" * 40}


def keys(credentials: RoleCredentials) -> dict[str, str]:
    return {
        "aws_access_key_id": credentials.access_key_id,
        "aws_secret_access_key": credentials.secret_access_key,
        "aws_session_token": credentials.session_token,
    }


def client(runtime: LocalRuntime, service: str, **kwargs: Any) -> Any:
    return boto3.client(service, region_name=REGION, endpoint_url=runtime.endpoint_url, **kwargs)


@pytest.fixture(scope="module")
def sessions(runtime: LocalRuntime) -> tuple[RoleCredentials, dict[str, str]]:
    """JOB training on its instance: the instance's role session and the job's session from the route."""
    instance = training_job(runtime, JOB, "i-j001", {})
    frozen = Credentials(instance.access_key_id, instance.secret_access_key, instance.session_token)
    source = JobCredentialsSource(
        f"{runtime.api_url}{AGENT_CREDENTIALS_PATH}",
        REGION,
        lambda: frozen,
        job_id=JOB,
        attempt=1,
        attempts=1,
    )
    found = source.fetch()
    return (
        instance,
        {
            "aws_access_key_id": found.access_key_id,
            "aws_secret_access_key": found.secret_access_key,
            "aws_session_token": found.session_token,
        },
    )


def test_unsigned_requests_and_unknown_keys_are_refused_as_each_service_refuses_them(runtime, sessions):
    # Given an object and a table the runtime's own credentials reach
    bucket, table = runtime.settings.jobs_bucket, runtime.settings.jobs_table
    runtime.client("s3").put_object(Bucket=bucket, Key="examples/any", Body=b"x")
    instance, _ = sessions
    unsigned = {"config": Config(signature_version=UNSIGNED)}
    forged_token = {**keys(instance), "aws_session_token": "not-the-token"}

    # When unsigned requests, an unknown key and a known key with another session token call
    # Then each is refused with the service's own error (the common errors of the JSON, query, EC2 and S3 APIs)
    assert error_code(lambda: client(runtime, "dynamodb", **unsigned).scan(TableName=table)) == (
        "MissingAuthenticationTokenException"
    )
    assert error_code(
        lambda: client(runtime, "s3", **unsigned).get_object(Bucket=bucket, Key="examples/any")
    ) == ("AccessDenied")
    assert error_code(lambda: client(runtime, "dynamodb", **UNKNOWN).scan(TableName=table)) == (
        "UnrecognizedClientException"
    )
    assert (
        error_code(lambda: client(runtime, "sts", **UNKNOWN).get_caller_identity()) == "InvalidClientTokenId"
    )
    assert error_code(lambda: client(runtime, "ec2", **UNKNOWN).describe_instances()) == "AuthFailure"
    assert error_code(
        lambda: client(runtime, "s3", **UNKNOWN).get_object(Bucket=bucket, Key="examples/any")
    ) == ("InvalidAccessKeyId")
    assert error_code(lambda: client(runtime, "dynamodb", **forged_token).scan(TableName=table)) == (
        "UnrecognizedClientException"
    )
    assert error_code(lambda: client(runtime, "s3", **forged_token).get_object(Bucket=bucket, Key="x")) == (
        "InvalidToken"
    )
    # and the runtime's own credentials, and the instance's, are served
    assert runtime.client("dynamodb").scan(TableName=table)["Count"] >= 1
    identity = client(runtime, "sts", **keys(instance)).get_caller_identity()
    assert identity["Account"] == "123456789012"


def test_a_delete_of_several_keys_removes_the_jobs_own_and_refuses_the_others(runtime, sessions):
    # Given a checkpoint of the job and one of another job
    bucket = runtime.settings.jobs_bucket
    own, other = f"{checkpoints_prefix(JOB)}step-1/a", f"{checkpoints_prefix(OTHER)}step-1/a"
    for key in (own, other):
        runtime.client("s3").put_object(Bucket=bucket, Key=key, Body=b"x")
    _, job = sessions

    # When the job's session deletes both in one request
    answer = client(runtime, "s3", **job).delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": own}, {"Key": other}]}
    )

    # Then S3 deletes its own and reports the other refused, which stays
    assert [d["Key"] for d in answer.get("Deleted", [])] == [own]
    assert [(e["Key"], e["Code"]) for e in answer.get("Errors", [])] == [(other, "AccessDenied")]
    listed = runtime.client("s3").list_objects_v2(Bucket=bucket, Prefix="jobs/")
    keys_left = {o["Key"] for o in listed.get("Contents", [])}
    assert other in keys_left
    assert own not in keys_left


def test_the_instance_role_puts_metrics_in_spotruns_namespace_only(runtime, sessions):
    # Given an instance's role session (its statement: cloudwatch:PutMetricData on the spotrun namespace)
    instance, _ = sessions
    cloudwatch = client(runtime, "cloudwatch", **keys(instance))
    metric = [{"MetricName": "gpu_utilization", "Value": 1.0}]

    # When it puts metrics in spotrun's namespace, Then they are served (the condition key is the request's)
    cloudwatch.put_metric_data(Namespace="spotrun", MetricData=metric)
    # and in another namespace they are refused
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        cloudwatch.put_metric_data(Namespace="other", MetricData=metric)
    assert refused.value.response["Error"]["Code"] == "AccessDeniedException", refused.value.response


def test_sessions_expire_on_the_emulators_clock(runtime, sessions):
    # Given the job's session writing its stream (the credentials route opened it) and the instance's session
    # calling STS, both served
    instance, job = sessions
    group, stream = log_group(runtime.settings.jobs_bucket), log_stream(JOB, 1)
    event = [{"timestamp": 1, "message": "before"}]
    logs = client(runtime, "logs", **job)
    logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=event)
    client(runtime, "sts", **keys(instance)).get_caller_identity()

    # When the emulator's clock passes the job session's hour
    runtime.clock.advance(SESSION_SECONDS + 1)

    # Then the job's session is refused as expired by each service, and the instance's six hours still run
    assert error_code(
        lambda: logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=event)
    ) == ("ExpiredTokenException")
    bucket = runtime.settings.jobs_bucket
    s3 = client(runtime, "s3", **job)
    assert error_code(lambda: s3.list_objects_v2(Bucket=bucket, Prefix=f"jobs/{JOB}/")) == "ExpiredToken"
    client(runtime, "sts", **keys(instance)).get_caller_identity()

    # and when it passes the instance session's six hours, that one is refused too
    runtime.clock.advance(6 * 3600)
    assert (
        error_code(lambda: client(runtime, "sts", **keys(instance)).get_caller_identity()) == "ExpiredToken"
    )
    assert (
        error_code(lambda: client(runtime, "ec2", **keys(instance)).describe_instances()) == "RequestExpired"
    )
    ssm = client(runtime, "ssm", **keys(instance))
    assert error_code(lambda: ssm.get_parameter(Name="/team/anything")) == "ExpiredTokenException"

"""The agent route through the API Gateway stand-in: only the job's own instance moves its workflow."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fixtures_handlers as handlers  # noqa: E402
from agent_route_world import NOW, agent_route_runtime, job_on_instance  # noqa: E402, F401 - the `runtime` fixture

from spotrun.agent.reporter import ApiReporter, ReportError, TaskAbandonedError  # noqa: E402
from spotrun.local.iam.roles import INSTANCE_ROLE_NAME  # noqa: E402
from spotrun.local.instances.imds import ImdsServer, InstanceMetadata, RoleCredentials  # noqa: E402
from spotrun.local.runtime import LocalRuntime  # noqa: E402
from spotrun.model.agent_protocol.command import StageResult  # noqa: E402
from spotrun.model.job.record import JobStatus  # noqa: E402

STAGED = StageResult(files=3, bytes=30, seconds=0.1)


def wait_for(predicate: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("timed out")


def waiting_job(runtime: LocalRuntime, job_id: str, instance_id: str) -> tuple[str, RoleCredentials]:
    """An execution parked on a task token, its job staging on ``instance_id``, and that instance's session."""
    sfn = runtime.client("stepfunctions")
    arn = sfn.start_execution(
        stateMachineArn=runtime.settings.state_machine_arn, name=job_id, input=json.dumps({"key": job_id})
    )["executionArn"]
    token = wait_for(lambda: handlers.TOKENS.get(job_id))
    credentials = job_on_instance(runtime, job_id, instance_id, status=JobStatus.STAGING, task_token=token)
    return arn, credentials


def reporter(
    runtime: LocalRuntime, credentials: RoleCredentials, job_id: str, secret: str = ""
) -> ApiReporter:
    frozen = Credentials(
        credentials.access_key_id, secret or credentials.secret_access_key, credentials.session_token
    )
    url = f"{runtime.api_url}/agent/reports"
    return ApiReporter(
        url, runtime.region, lambda: frozen, job_id=job_id, attempt=1, step="stage", attempts=1
    )


def status(runtime: LocalRuntime, arn: str) -> str:
    return str(runtime.client("stepfunctions").describe_execution(executionArn=arn)["status"])


def test_only_the_jobs_own_instance_moves_its_workflow(runtime: LocalRuntime) -> None:
    # Given two jobs, each waiting on staging, on instances i-aaaa and i-bbbb
    a_arn, a_credentials = waiting_job(runtime, "job-a-00000000000a", "i-aaaa")
    b_arn, b_credentials = waiting_job(runtime, "job-b-00000000000b", "i-bbbb")

    # When job-b's instance reports job-a's success, signed with its own credentials
    with pytest.raises(ReportError, match="403") as refused:
        reporter(runtime, b_credentials, "job-a-00000000000a").succeed(STAGED)
    # Then it is refused and job-a's task is untouched
    assert not isinstance(refused.value, TaskAbandonedError)
    time.sleep(0.3)
    assert status(runtime, a_arn) == "RUNNING"

    # When job-a's instance reports its own heartbeat and success
    own = reporter(runtime, a_credentials, "job-a-00000000000a")
    own.heartbeat()
    own.succeed(STAGED)
    # Then job-a's workflow moves on with that output, and job-b still waits
    wait_for(lambda: status(runtime, a_arn) == "SUCCEEDED")
    output = json.loads(runtime.client("stepfunctions").describe_execution(executionArn=a_arn)["output"])
    assert output == STAGED.model_dump()
    assert status(runtime, b_arn) == "RUNNING"
    # and a second answer finds the task gone (410), which the agent treats as abandoned
    with pytest.raises(TaskAbandonedError, match="410"):
        own.succeed(STAGED)


def test_an_unsigned_or_badly_signed_report_is_refused(runtime: LocalRuntime) -> None:
    # Given a job waiting on its instance
    arn, credentials = waiting_job(runtime, "job-c-00000000000c", "i-cccc")
    body = json.dumps(
        {"job_id": "job-c-00000000000c", "attempt": 1, "step": "stage", "kind": "heartbeat"}
    ).encode()

    # When the report is posted unsigned
    request = urllib.request.Request(  # noqa: S310 - the local stand-in
        f"{runtime.api_url}/agent/reports",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as unsigned:
        urllib.request.urlopen(request, timeout=10)  # noqa: S310 - the local stand-in
    # Then the route refuses it: no identity
    assert unsigned.value.code == 403

    # When it is signed with the instance's key but another secret
    with pytest.raises(ReportError, match="403"):
        reporter(runtime, credentials, "job-c-00000000000c", secret="not-the-secret").heartbeat()
    # Then the stand-in refuses the signature, and the task still waits
    assert status(runtime, arn) == "RUNNING"


def test_botocore_reads_an_instances_own_role_credentials_from_its_imds(monkeypatch) -> None:
    # Given an instance's metadata service holding its role session
    credentials = RoleCredentials.issue(INSTANCE_ROLE_NAME)
    metadata = InstanceMetadata("i-dddd", "g5.xlarge", "us-east-1a", "spot", credentials=credentials)
    server = ImdsServer(metadata)
    server.start()
    try:
        # When boto3 looks for credentials with only the metadata endpoint in its environment (as the agent)
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", server.endpoint)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
        found = boto3.session.Session(region_name="us-east-1").get_credentials()
    finally:
        server.stop()
    # Then it signs with that instance's session
    assert found is not None
    assert found.method == "iam-role"
    frozen = found.get_frozen_credentials()
    assert (frozen.access_key, frozen.secret_key, frozen.token) == (
        credentials.access_key_id,
        credentials.secret_access_key,
        credentials.session_token,
    )


@pytest.mark.parametrize("flaw", ["session-token", "service", "expired"])
def test_a_signature_with_the_wrong_token_service_or_an_expired_session_is_refused(
    runtime: LocalRuntime, flaw: str
) -> None:
    # Given a job waiting on its instance, whose session is registered (expired, for one case)
    job_id, instance_id = f"job-{flaw}", f"i-{flaw}"
    arn, credentials = waiting_job(runtime, job_id, instance_id)
    if flaw == "expired":
        credentials = RoleCredentials.issue(INSTANCE_ROLE_NAME, lifetime=timedelta(seconds=-1))
        runtime.callers.register_instance(instance_id, credentials)
    token = "another-token" if flaw == "session-token" else credentials.session_token
    signing = Credentials(credentials.access_key_id, credentials.secret_access_key, token)
    body = json.dumps({"job_id": job_id, "attempt": 1, "step": "stage", "kind": "heartbeat"}).encode()
    url = f"{runtime.api_url}/agent/reports"
    request = AWSRequest(method="POST", url=url, data=body, headers={"Content-Type": "application/json"})
    SigV4Auth(signing, "s3" if flaw == "service" else "execute-api", runtime.region).add_auth(request)

    # When the heartbeat is posted with that signature
    signed = urllib.request.Request(url, data=body, headers=dict(request.headers.items()), method="POST")  # noqa: S310
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(signed, timeout=10)  # noqa: S310 - the local stand-in
    # Then the stand-in refuses it, and the task still waits
    assert refused.value.code == 403
    assert status(runtime, arn) == "RUNNING"

"""The agent's credentials route: only the job's own instance gets the job's session, which reaches only its S3."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import pytest
from botocore.credentials import Credentials

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from agent_route_world import NOW, agent_route_runtime, job_on_instance  # noqa: E402, F401 - the `runtime` fixture

from spotrun.agent.credentials import CredentialsError, JobCredentialsSource  # noqa: E402
from spotrun.local.iam.roles import JOB_ACCESS_ROLE_NAME  # noqa: E402
from spotrun.local.instances.imds import RoleCredentials  # noqa: E402
from spotrun.local.runtime import LocalRuntime  # noqa: E402
from spotrun.model.agent_protocol.api_paths import AGENT_CREDENTIALS_PATH  # noqa: E402
from spotrun.model.agent_protocol.session_policy import SESSION_SECONDS  # noqa: E402
from spotrun.model.job.record import JobStatus  # noqa: E402
from spotrun.model.layout import agent_command_key, checkpoints_prefix  # noqa: E402
from spotrun.model.manifest.schema import JobManifest  # noqa: E402


def training_job(runtime: LocalRuntime, job_id: str, instance_id: str) -> RoleCredentials:
    """A job training on ``instance_id`` (attempt 1, a manifest with code in the jobs bucket); its session."""
    manifest = JobManifest.model_validate(
        {
            "name": "e",
            "resources": {"gpu_names": ["t4"], "gpus_per_node": 1},
            "training": {
                "command": ["python", "train.py"],
                "code": f"s3://{runtime.settings.jobs_bucket}/examples/code/",
            },
        }
    )
    return job_on_instance(runtime, job_id, instance_id, status=JobStatus.TRAINING, manifest=manifest)


def credentials_source(
    runtime: LocalRuntime, credentials: RoleCredentials, job_id: str, attempt: int = 1
) -> JobCredentialsSource:
    frozen = Credentials(credentials.access_key_id, credentials.secret_access_key, credentials.session_token)
    return JobCredentialsSource(
        f"{runtime.api_url}{AGENT_CREDENTIALS_PATH}",
        runtime.region,
        lambda: frozen,
        job_id=job_id,
        attempt=attempt,
        attempts=1,
    )


def test_only_the_jobs_own_instance_gets_its_credentials(runtime: LocalRuntime) -> None:
    # Given a job training on i-eeee, and another job's instance i-ffff
    own = training_job(runtime, "job-e-00000000000e", "i-eeee")
    other = training_job(runtime, "job-f-00000000000f", "i-ffff")

    # When the other instance asks for the job's credentials, or its own instance for another attempt
    # Then they are refused: 403 not its instance, 409 not its open attempt
    with pytest.raises(CredentialsError, match=r"\(403\)"):
        credentials_source(runtime, other, "job-e-00000000000e").fetch()
    with pytest.raises(CredentialsError, match=r"\(409\)"):
        credentials_source(runtime, own, "job-e-00000000000e", attempt=2).fetch()

    # When its own instance asks
    issued = credentials_source(runtime, own, "job-e-00000000000e").fetch()
    # Then it gets a session of the job-access role named after the job, for at most an hour
    identity = boto3.client(
        "sts",
        region_name=runtime.region,
        aws_access_key_id=issued.access_key_id,
        aws_secret_access_key=issued.secret_access_key,
        aws_session_token=issued.session_token,
    ).get_caller_identity()
    assert identity["Arn"].endswith(f":assumed-role/{JOB_ACCESS_ROLE_NAME}/job-e-00000000000e"), identity
    assert issued.expiration <= datetime.now(UTC) + timedelta(seconds=SESSION_SECONDS + 5)


def s3_as(runtime: LocalRuntime, access_key: str, secret: str, token: str) -> Any:
    return boto3.client(
        "s3",
        region_name=runtime.region,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret,
        aws_session_token=token,
    )


def code(s3: Any, call: Any) -> str:
    try:
        call(s3)
    except botocore.exceptions.ClientError as exc:
        return str(exc.response["Error"]["Code"])
    return "allowed"


def test_the_emulator_holds_job_credentials_to_their_session_policy(runtime: LocalRuntime) -> None:
    # Given two jobs' command documents, and job g's instance with its job's credentials
    bucket = runtime.settings.jobs_bucket
    own_key, other_key = (
        agent_command_key("job-g-000000000001", 1, "train"),
        agent_command_key("job-h-000000000002", 1, "train"),
    )
    for key in (own_key, other_key):
        runtime.client("s3").put_object(Bucket=bucket, Key=key, Body=b"{}")
    instance = training_job(runtime, "job-g-000000000001", "i-gggg")
    issued = credentials_source(runtime, instance, "job-g-000000000001").fetch()
    job = s3_as(runtime, issued.access_key_id, issued.secret_access_key, issued.session_token)
    on_instance = s3_as(runtime, instance.access_key_id, instance.secret_access_key, instance.session_token)
    other_checkpoint = f"{checkpoints_prefix('job-h-000000000002')}step-000000000001/_COMMITTED.json"

    # Then the job's credentials read its own command, list and write its checkpoints
    assert code(job, lambda s3: s3.get_object(Bucket=bucket, Key=own_key)) == "allowed"
    assert (
        code(
            job, lambda s3: s3.list_objects_v2(Bucket=bucket, Prefix=checkpoints_prefix("job-g-000000000001"))
        )
        == "allowed"
    )
    own_checkpoint = f"{checkpoints_prefix('job-g-000000000001')}step-000000000001/_COMMITTED.json"
    assert code(job, lambda s3: s3.put_object(Bucket=bucket, Key=own_checkpoint, Body=b"{}")) == "allowed"
    deleted = job.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": own_checkpoint}]})
    # (a refused DeleteObjects key answers 200 with the key under Errors, not a ClientError)
    assert (deleted.get("Errors", []), keys_of(deleted.get("Deleted", []))) == ([], [own_checkpoint])
    assert runtime.client("s3").list_objects_v2(Bucket=bucket, Prefix=own_checkpoint)["KeyCount"] == 0
    # and are refused, as S3 refuses, another job's command, checkpoints and listing, and their own command's write
    assert code(job, lambda s3: s3.get_object(Bucket=bucket, Key=other_key)) == "AccessDenied"
    assert code(job, lambda s3: s3.head_object(Bucket=bucket, Key=other_key)) in ("AccessDenied", "403")
    assert (
        code(job, lambda s3: s3.put_object(Bucket=bucket, Key=other_checkpoint, Body=b"x")) == "AccessDenied"
    )
    assert code(job, lambda s3: s3.put_object(Bucket=bucket, Key=own_key, Body=b"x")) == "AccessDenied"
    assert code(job, lambda s3: s3.list_objects_v2(Bucket=bucket, Prefix="jobs/")) == "AccessDenied"
    assert code(job, lambda s3: s3.delete_object(Bucket=bucket, Key=other_key)) == "AccessDenied"
    # and the instance's own role session reaches nothing of the bucket
    assert code(on_instance, lambda s3: s3.get_object(Bucket=bucket, Key=own_key)) == "AccessDenied"
    assert code(on_instance, lambda s3: s3.list_objects_v2(Bucket=bucket, Prefix="jobs/")) == "AccessDenied"
    # and nothing of another job was written or removed
    assert runtime.client("s3").get_object(Bucket=bucket, Key=other_key)["Body"].read() == b"{}"
    assert runtime.client("s3").list_objects_v2(Bucket=bucket, Prefix=other_checkpoint)["KeyCount"] == 0


def keys_of(entries: list[dict[str, Any]]) -> list[str]:
    return [str(entry["Key"]) for entry in entries]


def test_a_delete_batch_removes_the_jobs_own_keys_and_refuses_each_other_jobs_key(
    runtime: LocalRuntime,
) -> None:
    # Given a checkpoint of job g and one of job h, and job g's instance with its job's credentials
    bucket, admin = runtime.settings.jobs_bucket, runtime.client("s3")
    own = f"{checkpoints_prefix('job-g-000000000003')}step-000000000001/_COMMITTED.json"
    other = f"{checkpoints_prefix('job-h-000000000004')}step-000000000001/_COMMITTED.json"
    for key in (own, other):
        admin.put_object(Bucket=bucket, Key=key, Body=b"{}")
    instance = training_job(runtime, "job-g-000000000003", "i-gggh")
    issued = credentials_source(runtime, instance, "job-g-000000000003").fetch()
    job = s3_as(runtime, issued.access_key_id, issued.secret_access_key, issued.session_token)

    # When it deletes both in one DeleteObjects request
    answer = job.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": own}, {"Key": other}]})

    # Then S3 judges and deletes key by key, and reports each: its own key deleted, the other job's refused
    # (https://docs.aws.amazon.com/AmazonS3/latest/API/API_DeleteObjects.html)
    assert keys_of(answer.get("Deleted", [])) == [own], answer
    assert [(error["Key"], error["Code"]) for error in answer.get("Errors", [])] == [(other, "AccessDenied")]
    assert admin.list_objects_v2(Bucket=bucket, Prefix=own)["KeyCount"] == 0
    assert admin.get_object(Bucket=bucket, Key=other)["Body"].read() == b"{}"

    # When it asks to delete the other job's key alone
    refused = job.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": other}]})
    # Then the request answers, the key under Errors, and the object stays
    assert keys_of(refused.get("Deleted", [])) == []
    assert [(error["Key"], error["Code"]) for error in refused.get("Errors", [])] == [(other, "AccessDenied")]
    assert admin.get_object(Bucket=bucket, Key=other)["Body"].read() == b"{}"

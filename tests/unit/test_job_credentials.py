"""The credentials decision: the instance of a job's open attempt gets that job's session policy, no one else."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from spotrun.control.agent_reports import CallerIdentity, ReportNotWaited, ReportRefused
from spotrun.control.job_credentials import CredentialsRequest, issue_job_credentials
from spotrun.model.agent_protocol.session_policy import JobAccessRefused, JobCredentials, job_session_policy
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import Job, JobStatus, ManifestSource
from spotrun.model.manifest.schema import JobManifest
from tests.unit.fakes import InMemoryJobStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ACCOUNT = "123456789012"
ROLE = "spotrun-instances"
JOBS = "spotrun-jobs"
JOB = "job-a-00000000000a"


class RecordingAccess:
    """A fake JobAccess: records what it was asked for."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def credentials(self, session_name: str, session_policy: str) -> JobCredentials:
        self.asked.append((session_name, session_policy))
        return JobCredentials(
            access_key_id="ASIAFAKEFAKEFAKE0001", secret_access_key="s", session_token="t", expiration=NOW
        )


def manifest(code: str = f"s3://{JOBS}/examples/code/") -> JobManifest:
    return JobManifest.model_validate(
        {
            "name": "a",
            "resources": {"gpu_names": ["t4"], "gpus_per_node": 1},
            "training": {"command": ["python", "train.py"], "code": code},
        }
    )


def job(document: JobManifest | None = None, attempts: int = 1) -> Job:
    return Job(
        job_id=JOB,
        name="a",
        status=JobStatus.TRAINING,
        source=ManifestSource(),
        manifest=document or manifest(),
        created_at=NOW,
        updated_at=NOW,
        attempts=[
            Attempt(
                number=n,
                instance_id=f"i-{n:04d}",
                instance_type="g5.xlarge",
                availability_zone="us-east-1a",
                lifecycle="spot",
                price_per_hour=0.3,
                started_at=NOW,
                ended_at=None if n == attempts else NOW,
            )
            for n in range(1, attempts + 1)
        ],
    )


class NoLogs:
    """CloudWatch Logs that opens every stream asked for (the live log's own tests check which)."""

    def create_stream(self, group: str, stream: str) -> None:
        return None


def caller(instance_id: str) -> CallerIdentity:
    return CallerIdentity(
        user_arn=f"arn:aws:sts::{ACCOUNT}:assumed-role/{ROLE}/{instance_id}", account_id=ACCOUNT
    )


def issue(
    store: InMemoryJobStore, access: RecordingAccess, instance_id: str, attempt: int = 1
) -> JobCredentials:
    return issue_job_credentials(
        CredentialsRequest(job_id=JOB, attempt=attempt),
        identity=caller(instance_id),
        instance_role_name=ROLE,
        jobs_bucket=JOBS,
        partition="aws",
        store=store,
        access=access,
        logs=NoLogs(),
    )


def test_the_open_attempts_instance_gets_a_session_named_after_the_job_with_its_policy():
    # Given a job whose second attempt runs on i-0002
    store, access = InMemoryJobStore(), RecordingAccess()
    store.create(job(attempts=2))

    # When that instance asks for attempt 2's credentials
    issued = issue(store, access, "i-0002", attempt=2)

    # Then STS was asked for a session named after the job, with exactly that attempt's session policy
    assert issued.access_key_id == "ASIAFAKEFAKEFAKE0001"
    [(name, policy)] = access.asked
    assert name == JOB
    assert json.loads(policy) == job_session_policy(JOB, 2, manifest(), jobs_bucket=JOBS, partition="aws")


@pytest.mark.parametrize("instance_id", ["i-0001", "i-9999"])
def test_another_instance_or_an_ended_attempts_gets_nothing(instance_id):
    # Given a job whose open attempt runs on i-0002 (i-0001 ran the ended first one)
    store, access = InMemoryJobStore(), RecordingAccess()
    store.create(job(attempts=2))

    # When another instance asks, Then it is refused and STS is never asked
    with pytest.raises(ReportRefused, match="does not run an open attempt"):
        issue(store, access, instance_id, attempt=2)
    assert access.asked == []


def test_a_request_for_another_attempt_is_not_answered():
    # Given a job whose open attempt is the second
    store, access = InMemoryJobStore(), RecordingAccess()
    store.create(job(attempts=2))

    # When its instance asks for attempt 1's credentials, Then it is refused as another attempt
    with pytest.raises(ReportNotWaited, match="runs attempt 2, not attempt 1"):
        issue(store, access, "i-0002", attempt=1)
    assert access.asked == []


def test_a_manifest_reaching_into_jobs_gets_no_credentials():
    # Given a job whose code is another job's prefix
    store, access = InMemoryJobStore(), RecordingAccess()
    store.create(job(manifest(code=f"s3://{JOBS}/jobs/other-00000000000b/")))

    # When its instance asks, Then it is refused and STS is never asked
    with pytest.raises(JobAccessRefused):
        issue(store, access, "i-0001")
    assert access.asked == []


@pytest.mark.parametrize("attempt", [True, "2"])
def test_an_attempt_that_is_not_an_integer_is_refused(attempt: object):
    # Given a credentials request whose attempt is a boolean or a numeric string
    body = {"job_id": JOB, "attempt": attempt}

    # When it is validated / Then it is refused, not read as attempt 1 or 2
    with pytest.raises(ValidationError, match="attempt"):
        CredentialsRequest.model_validate(body)

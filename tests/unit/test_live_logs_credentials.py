"""Issuing a job's credentials opens its attempt's log stream, which those credentials may write, not create."""

from __future__ import annotations

from spotrun.control.job_credentials import CredentialsRequest, issue_job_credentials
from tests.unit.fakes import InMemoryJobStore
from tests.unit.test_job_credentials import JOB, JOBS, ROLE, RecordingAccess, caller, job


class RecordingLogs:
    """CloudWatch Logs that records the streams it is asked to create, or fails them all."""

    def __init__(self, *, fails: bool = False) -> None:
        self.created: list[tuple[str, str]] = []
        self.fails = fails

    def create_stream(self, group: str, stream: str) -> None:
        if self.fails:
            raise RuntimeError("CloudWatch Logs is unreachable")
        self.created.append((group, stream))


def _issue(logs: RecordingLogs) -> RecordingAccess:
    store, access = InMemoryJobStore(), RecordingAccess()
    store.create(job(attempts=2))
    issue_job_credentials(
        CredentialsRequest(job_id=JOB, attempt=2),
        identity=caller("i-0002"),
        instance_role_name=ROLE,
        jobs_bucket=JOBS,
        partition="aws",
        store=store,
        access=access,
        logs=logs,
    )
    return access


def test_the_attempts_stream_is_created_in_the_deployments_group_before_the_credentials_go_out():
    # Given CloudWatch Logs, When attempt 2's instance gets its credentials
    logs = RecordingLogs()
    access = _issue(logs)

    # Then attempt 2's stream was created in the group named after the jobs bucket, and STS was asked
    assert logs.created == [(f"/spotrun/{JOBS}", f"{JOB}/attempt-002")]
    assert len(access.asked) == 1


def test_credentials_still_go_out_when_the_stream_cannot_be_created():
    # Given CloudWatch Logs that fails, When the credentials are asked for, Then they are issued all the same
    assert len(_issue(RecordingLogs(fails=True)).asked) == 1

"""The agent's job credentials: asked of the API's route only, refreshed before they expire, matched to the key."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spotrun.agent.credentials import CredentialsError, JobCredentialsSource, job_session
from spotrun.agent.step_runner import AgentSettings, CommandRefusedError, job_s3_session, load_command
from spotrun.model.agent_protocol.command import AgentCommand
from spotrun.model.agent_protocol.session_policy import JobCredentials
from spotrun.model.layout import agent_command_key
from spotrun.model.manifest.schema import JobManifest

URL = "http://127.0.0.1:8080/agent/credentials"
JOB = "tiny-0123456789ab"


class CountingSource(JobCredentialsSource):
    """Answers credentials that expire ``lifetime`` from now, counting the calls."""

    def __init__(self, lifetime: timedelta):
        super().__init__(URL, "us-east-1", lambda: None, job_id=JOB, attempt=1)
        self.lifetime = lifetime
        self.calls = 0

    def fetch(self) -> JobCredentials:
        self.calls += 1
        return JobCredentials(
            access_key_id=f"ASIAFAKEFAKEFAKE{self.calls:04d}",
            secret_access_key="secret",
            session_token="token",
            expiration=datetime.now(UTC) + self.lifetime,
        )


def test_the_session_fetches_on_first_use_and_again_when_they_run_short():
    # Given a session fed by a source of credentials valid for an hour
    source = CountingSource(timedelta(hours=1))
    credentials = job_session(source, "us-east-1").get_credentials()

    # When nothing has signed yet, Then nothing was asked
    assert source.calls == 0
    # When they are read twice, Then they were asked once, and are the route's
    assert credentials.get_frozen_credentials().access_key == "ASIAFAKEFAKEFAKE0001"
    assert credentials.get_frozen_credentials().access_key == "ASIAFAKEFAKEFAKE0001"
    assert source.calls == 1

    # Given credentials that expire within botocore's mandatory refresh window (10 minutes)
    source.lifetime = timedelta(minutes=5)
    short = job_session(source, "us-east-1").get_credentials()
    short.get_frozen_credentials()
    calls = source.calls
    # When they are read again, Then they are asked again before use
    assert short.get_frozen_credentials().access_key == f"ASIAFAKEFAKEFAKE{calls + 1:04d}"


@pytest.mark.parametrize(
    "url", ["https://attacker.example/agent/credentials", "http://127.0.0.1:8080/agent/reports", ""]
)
def test_credentials_are_asked_of_the_apis_route_only(url):
    # When the source is given another URL, Then it refuses before anything is signed or sent
    with pytest.raises(CredentialsError, match="not the API's credentials route"):
        JobCredentialsSource(url, "us-east-1", lambda: None, job_id=JOB, attempt=1)


def test_without_a_route_the_machines_own_credentials_are_used_and_a_bad_route_is_refused():
    # Given a command URI of the job's first train step
    uri = f"s3://spotrun-jobs/{agent_command_key(JOB, 1, 'train')}"

    # Then off EC2 (no route) the session is the machine's own, and a wrong route refuses the command
    assert job_s3_session(uri, AgentSettings(), "us-east-1") is None
    with pytest.raises(CommandRefusedError, match="not the API's credentials route"):
        job_s3_session(uri, AgentSettings(credentials_url="http://elsewhere/agent/credentials"), "us-east-1")
    with pytest.raises(CommandRefusedError, match="not the key of an agent command document"):
        job_s3_session("s3://spotrun-jobs/jobs/x/other.json", AgentSettings(credentials_url=URL), "us-east-1")


class OneDocument:
    def __init__(self, body: bytes):
        self.body = body

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803 - boto3's names
        return {"Body": io.BytesIO(self.body)}


def test_a_command_whose_job_or_attempt_is_not_its_keys_is_refused():
    # Given a valid train command of attempt 1, stored under attempt 2's key
    command = AgentCommand(
        step="train",
        job_id=JOB,
        attempt=1,
        region="us-east-1",
        jobs_bucket="spotrun-jobs",
        manifest=JobManifest.model_validate(
            {
                "name": "tiny",
                "resources": {"gpu_names": ["t4"], "gpus_per_node": 1},
                "training": {"command": ["python", "train.py"]},
            }
        ),
        heartbeat_seconds=30,
        poll_seconds=1,
    )
    s3 = OneDocument(command.model_dump_json().encode())

    # When it is loaded from its own key, Then it is the command; from another's, it is refused
    assert load_command(s3, f"s3://spotrun-jobs/{agent_command_key(JOB, 1, 'train')}") == command
    with pytest.raises(CommandRefusedError, match="not the ones of the document's key"):
        load_command(s3, f"s3://spotrun-jobs/{agent_command_key(JOB, 2, 'train')}")

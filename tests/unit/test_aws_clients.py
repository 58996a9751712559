"""The one factory of boto3 clients for the functions and their adapters: sessions and clients made once."""

from __future__ import annotations

import threading
import weakref

import boto3
import pytest

from spotrun.agent import step_runner
from spotrun.aws import adapters


@pytest.fixture
def sessions(monkeypatch):
    """Count the boto3 sessions made; no endpoint override, fake credentials (nothing is called)."""
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    made: list[boto3.session.Session] = []
    real = boto3.session.Session

    def counted(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(boto3.session, "Session", counted)
    adapters.forget_clients()
    monkeypatch.setattr(step_runner, "_machine_sessions", {})
    monkeypatch.setattr(step_runner, "_clients", weakref.WeakKeyDictionary())
    yield made
    adapters.forget_clients()


def test_tables_and_clients_come_from_one_session(sessions):
    # When two job-store tables and two clients are made
    first = adapters.dynamodb_table("spotrun-jobs", "us-east-1")
    second = adapters.dynamodb_table("spotrun-jobs", "us-east-1")
    ec2 = adapters.client("ec2", "us-east-1")
    # Then one session made them all, each table is its own resource, and a client is made once
    assert len(sessions) == 1
    assert first is not second
    assert adapters.client("ec2", "us-east-1") is ec2


def test_another_endpoint_gets_its_own_session_and_clients(sessions, monkeypatch):
    # Given a client made against one endpoint
    ec2 = adapters.client("ec2", "us-east-1")
    # When the endpoint changes (a new emulator)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    other = adapters.client("ec2", "us-east-1")
    # Then a new session and client serve it
    assert other is not ec2
    assert len(sessions) == 2


def test_tables_on_one_thread_share_one_service_resource_and_threads_do_not(sessions):
    # When two tables are made on this thread, and one on another thread
    first = adapters.dynamodb_table("spotrun-jobs", "us-east-1")
    second = adapters.dynamodb_table("spotrun-other", "us-east-1")
    elsewhere: list = []
    thread = threading.Thread(
        target=lambda: elsewhere.append(adapters.dynamodb_table("spotrun-jobs", "us-east-1"))
    )
    thread.start()
    thread.join()
    # Then this thread's tables share one service resource (one client), and the other thread has its own
    assert first.meta.client is second.meta.client
    assert elsewhere[0].meta.client is not first.meta.client


def test_forgetting_the_clients_drops_every_thread_s_resources(sessions):
    # Given a table made on this thread
    first = adapters.dynamodb_table("spotrun-jobs", "us-east-1")
    # When the clients are forgotten (a new emulator in the same process)
    adapters.forget_clients()
    # Then the next table comes from a new service resource
    assert adapters.dynamodb_table("spotrun-jobs", "us-east-1").meta.client is not first.meta.client


# The instance agent's clients (spotrun.agent.step_runner.aws_client): made once per session, service and region.


def test_the_agent_makes_one_client_per_session_and_service(sessions):
    # When the agent asks twice for S3 and once for CloudWatch with the machine's credentials, and once for S3
    # with a session of its own (the job's credentials)
    s3 = step_runner.aws_client("s3", "us-east-1")
    again = step_runner.aws_client("s3", "us-east-1")
    cloudwatch = step_runner.aws_client("cloudwatch", "us-east-1")
    job_session = boto3.session.Session(region_name="us-east-1")
    job_s3 = step_runner.aws_client("s3", "us-east-1", job_session)
    # Then the machine's clients come from one session, S3's is made once, and the job's session has its own
    assert again is s3
    assert cloudwatch is not s3
    assert job_s3 is not s3
    assert step_runner.aws_client("s3", "us-east-1", job_session) is job_s3
    assert len(sessions) == 2  # the machine's, and the job's made above


def test_the_agent_makes_new_clients_when_the_endpoint_changes(sessions, monkeypatch):
    # Given a client made against one endpoint
    s3 = step_runner.aws_client("s3", "us-east-1")
    # When the endpoint changes (a new emulator in the same process)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    # Then a new client serves it, at that endpoint
    other = step_runner.aws_client("s3", "us-east-1")
    assert other is not s3
    assert other.meta.endpoint_url == "http://127.0.0.1:1"

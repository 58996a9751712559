"""The one factory of boto3 clients for the functions and their adapters: sessions and clients made once."""

from __future__ import annotations

import boto3
import pytest

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

"""The agent's client config for transfers (spotrun.agent.transfer.client_config): what each setting changes
on the wire."""

from __future__ import annotations

import weakref
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse

from spotrun.agent import step_runner
from spotrun.agent.transfer.client_config import MAX_POOL_CONNECTIONS, transfer_config


class _EmptyBody:
    def stream(self) -> Any:
        return iter([b""])


def _sent_headers(client: Any, call: str, **kwargs: Any) -> dict[str, Any]:
    """Call ``client.<call>(**kwargs)`` without a network: the request's headers as they would be sent."""
    seen: dict[str, Any] = {}

    def capture(request: Any, **_: Any) -> AWSResponse:
        seen.update(request.headers)
        return AWSResponse(request.url, 200, {}, _EmptyBody())

    client.meta.events.register("before-send.s3.*", capture)
    getattr(client, call)(**kwargs)
    return seen


def _client(config: Any) -> Any:
    return boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",  # plain HTTP, as the emulator's endpoint; nothing listens there
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=config,
    )


def test_an_upload_over_http_is_not_hashed_again_for_its_signature():
    # Given the agent's client config, against a plain-HTTP endpoint
    client = _client(transfer_config())

    # When an object is put with the checksum the agent computed
    headers = _sent_headers(
        client, "put_object", Bucket="b", Key="k", Body=b"x" * 1024, ChecksumSHA256="A" * 43 + "="
    )

    # Then SigV4 signs no payload hash (botocore would hash the body once more over HTTP), and the checksum goes
    # (header names in any case: botocore's own signer writes X-Amz-Content-SHA256, the CRT's, which botocore
    # uses when awscrt is installed, x-amz-content-sha256)
    sent = {name.lower(): value for name, value in headers.items()}
    assert sent["x-amz-content-sha256"] in (b"UNSIGNED-PAYLOAD", "UNSIGNED-PAYLOAD")
    assert "x-amz-checksum-sha256" in sent


def test_the_agents_clients_are_made_with_the_transfer_config(monkeypatch):
    # Given no client made yet
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setattr(step_runner, "_machine_sessions", {})
    monkeypatch.setattr(step_runner, "_clients", weakref.WeakKeyDictionary())

    # When the agent makes its S3 client
    s3 = step_runner.aws_client("s3", "us-east-1")

    # Then it has the transfer config: the pool for parallel transfers and payload signing off
    assert s3.meta.config.max_pool_connections == MAX_POOL_CONNECTIONS
    assert s3.meta.config.s3["payload_signing_enabled"] is False

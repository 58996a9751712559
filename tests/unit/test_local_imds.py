"""The simulated instance metadata service: IMDSv2 tokens and spot notices."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from spotrun.local.imds import ImdsServer, InstanceMetadata


@pytest.fixture
def imds() -> Iterator[ImdsServer]:
    server = ImdsServer(InstanceMetadata("i-0abc", "g5.xlarge", "us-east-1b", "spot"))
    server.start()
    yield server
    server.stop()


def _request(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, method=method, headers=headers or {})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _token(imds: ImdsServer) -> str:
    status, token = _request(
        f"{imds.endpoint}/latest/api/token", "PUT", {"X-aws-ec2-metadata-token-ttl-seconds": "60"}
    )
    assert status == 200
    return token


def test_metadata_needs_a_session_token(imds: ImdsServer) -> None:
    # Given a running metadata service
    url = f"{imds.endpoint}/latest/meta-data/instance-id"

    # When read without a token, with a bad one, and with a fresh one
    without = _request(url)
    forged = _request(url, headers={"X-aws-ec2-metadata-token": "forged"})
    good = _request(url, headers={"X-aws-ec2-metadata-token": _token(imds)})

    # Then only the token from PUT /latest/api/token opens it
    assert without[0] == 401
    assert forged[0] == 401
    assert good == (200, "i-0abc")


def test_token_request_needs_a_valid_ttl(imds: ImdsServer) -> None:
    # Given / When a token is asked for without a TTL and with one out of range
    missing = _request(f"{imds.endpoint}/latest/api/token", "PUT")
    too_long = _request(
        f"{imds.endpoint}/latest/api/token", "PUT", {"X-aws-ec2-metadata-token-ttl-seconds": "21601"}
    )

    # Then both are refused
    assert missing[0] == 400
    assert too_long[0] == 400


def test_identity_paths(imds: ImdsServer) -> None:
    # Given a token
    headers = {"X-aws-ec2-metadata-token": _token(imds)}

    # When the identity paths are read
    def read(path: str) -> str:
        status, body = _request(f"{imds.endpoint}/latest/meta-data/{path}", headers=headers)
        assert status == 200
        return body

    # Then they describe the instance
    assert read("instance-type") == "g5.xlarge"
    assert read("placement/availability-zone") == "us-east-1b"
    assert read("instance-life-cycle") == "spot"


def test_notices_are_404_until_set(imds: ImdsServer) -> None:
    # Given no notice yet
    headers = {"X-aws-ec2-metadata-token": _token(imds)}
    action_url = f"{imds.endpoint}/latest/meta-data/spot/instance-action"
    rebalance_url = f"{imds.endpoint}/latest/meta-data/events/recommendations/rebalance"
    assert _request(action_url, headers=headers)[0] == 404
    assert _request(rebalance_url, headers=headers)[0] == 404

    # When chaos sets both
    imds.metadata.set_rebalance("2025-01-01T12:00:00Z")
    imds.metadata.set_instance_action("terminate", "2025-01-01T12:02:00Z")

    # Then both answer with the AWS payloads
    status, body = _request(action_url, headers=headers)
    assert status == 200
    assert json.loads(body) == {"action": "terminate", "time": "2025-01-01T12:02:00Z"}
    status, body = _request(rebalance_url, headers=headers)
    assert status == 200
    assert json.loads(body) == {"noticeTime": "2025-01-01T12:00:00Z"}


def test_a_stopped_service_refuses_connections(imds: ImdsServer) -> None:
    # Given the endpoint of a running service
    endpoint = imds.endpoint

    # When it stops (the instance terminated)
    imds.stop()

    # Then nothing answers any more
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{endpoint}/latest/meta-data/", timeout=2)  # noqa: S310

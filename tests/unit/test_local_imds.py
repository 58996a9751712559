"""The simulated instance metadata service: IMDSv2 tokens and spot notices."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from spotrun.local.instances.imds import ImdsServer, InstanceMetadata


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


def test_spot_termination_time_and_listing_appear_with_the_notice(imds: ImdsServer) -> None:
    # Given no notice yet
    headers = {"X-aws-ec2-metadata-token": _token(imds)}
    base = f"{imds.endpoint}/latest/meta-data"
    assert _request(f"{base}/spot/termination-time", headers=headers)[0] == 404
    assert _request(f"{base}/spot/", headers=headers)[0] == 404
    assert "spot/" not in _request(f"{base}/", headers=headers)[1].splitlines()

    # When EC2 marks the instance for termination
    imds.metadata.set_instance_action("terminate", "2025-01-01T12:02:00Z")

    # Then the legacy termination-time, the spot/ listing and its entry in the root listing all answer
    assert _request(f"{base}/spot/termination-time", headers=headers) == (200, "2025-01-01T12:02:00Z")
    assert _request(f"{base}/spot/", headers=headers) == (200, "instance-action\ntermination-time")
    assert "spot/" in _request(f"{base}/", headers=headers)[1].splitlines()


def test_listings_mark_sub_directories_with_a_slash(imds: ImdsServer) -> None:
    # Given a token
    headers = {"X-aws-ec2-metadata-token": _token(imds)}

    # When the root of the metadata and the placement directory are listed
    status, root = _request(f"{imds.endpoint}/latest/meta-data/", headers=headers)
    placement = _request(f"{imds.endpoint}/latest/meta-data/placement", headers=headers)

    # Then directories end with "/" and items do not
    assert status == 200
    entries = root.splitlines()
    assert "placement/" in entries
    assert "instance-id" in entries
    assert "placement" not in entries
    assert placement == (200, "availability-zone\navailability-zone-id\nregion")


def test_availability_zone_id_is_the_one_ec2_reports(imds: ImdsServer) -> None:
    # Given a token, and the zone id EC2's DescribeAvailabilityZones gives us-east-1b in the emulator
    headers = {"X-aws-ec2-metadata-token": _token(imds)}
    with mock_aws():
        zones = boto3.client("ec2", region_name="us-east-1").describe_availability_zones()[
            "AvailabilityZones"
        ]
    expected = next(zone["ZoneId"] for zone in zones if zone["ZoneName"] == "us-east-1b")

    # When the instance reads its zone id
    answer = _request(f"{imds.endpoint}/latest/meta-data/placement/availability-zone-id", headers=headers)

    # Then both agree (use1-az1)
    assert answer == (200, expected)
    assert expected == "use1-az1"


def test_token_path_takes_put_only(imds: ImdsServer) -> None:
    # Given a valid token
    headers = {"X-aws-ec2-metadata-token": _token(imds)}

    # When the token path is read with GET, with and without a token, and POSTed to
    with_token = _request(f"{imds.endpoint}/latest/api/token", headers=headers)
    without = _request(f"{imds.endpoint}/latest/api/token")
    posted = _request(
        f"{imds.endpoint}/latest/api/token", "POST", {"X-aws-ec2-metadata-token-ttl-seconds": "60"}
    )

    # Then each is 405 Method Not Allowed, as on EC2
    assert with_token[0] == 405
    assert without[0] == 405
    assert posted[0] == 405


def test_a_forwarded_token_request_is_refused(imds: ImdsServer) -> None:
    # Given / When a token is asked for through a proxy (X-Forwarded-For set)
    forwarded = _request(
        f"{imds.endpoint}/latest/api/token",
        "PUT",
        {"X-aws-ec2-metadata-token-ttl-seconds": "60", "X-Forwarded-For": "203.0.113.7"},
    )

    # Then IMDS refuses it, and issues no token
    assert forwarded[0] == 403
    assert forwarded[1] == "Forbidden"

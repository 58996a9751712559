"""A small IMDSv2 client: instance identity and the spot interruption / rebalance notices.

IMDSv2 needs a session token from ``PUT /latest/api/token``; every GET then carries it. The notices are 404
until they exist, which this client returns as None. Proxies are bypassed on purpose: the metadata service is
link-local, and an ``http_proxy`` set for the training job must not capture these requests.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

DEFAULT_ENDPOINT = "http://169.254.169.254"
TOKEN_TTL_SECONDS = 21600


class ImdsError(RuntimeError):
    """The metadata service could not be reached or answered unexpectedly."""


@dataclass(frozen=True)
class SpotInstanceAction:
    """``spot/instance-action``: the instance will be stopped, hibernated or terminated at ``time``."""

    action: str
    time: datetime | None


@dataclass(frozen=True)
class RebalanceRecommendation:
    """``events/recommendations/rebalance``: the instance is at elevated risk of interruption."""

    notice_time: datetime | None


def parse_time(value: Any) -> datetime | None:
    """Parse an RFC 3339 time such as ``2024-05-01T12:00:00Z``; None when absent or malformed."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class ImdsClient:
    """IMDSv2 over urllib, with short timeouts.

    Parameters
    ----------
    endpoint
        Base URL, ``http://169.254.169.254`` on EC2; the emulator gives each simulated instance its own.
    timeout
        Seconds per request.
    token_ttl_seconds
        Lifetime asked for the session token; it is renewed a minute before it expires.
    """

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        timeout: float = 1.0,
        token_ttl_seconds: int = TOKEN_TTL_SECONDS,
    ):
        if urlsplit(endpoint).scheme not in ("http", "https"):
            raise ValueError(f"IMDS endpoint must be an http(s) URL, got {endpoint!r}")
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self.token_ttl_seconds = token_ttl_seconds
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._token: str | None = None
        self._token_expires = 0.0
        self._lock = threading.Lock()

    def _request(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        request = urllib.request.Request(self.endpoint + path, method=method, headers=headers)  # noqa: S310 (scheme checked)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, b""
        except (urllib.error.URLError, OSError) as exc:
            raise ImdsError(f"IMDS {method} {path}: {exc}") from exc

    def _session_token(self, refresh: bool = False) -> str:
        with self._lock:
            if refresh or self._token is None or time.monotonic() >= self._token_expires:
                status, body = self._request(
                    "PUT",
                    "/latest/api/token",
                    {"X-aws-ec2-metadata-token-ttl-seconds": str(self.token_ttl_seconds)},
                )
                if status != 200:
                    raise ImdsError(f"IMDS token request answered {status}")
                self._token = body.decode().strip()
                self._token_expires = time.monotonic() + max(1, self.token_ttl_seconds - 60)
            return self._token

    def get(self, path: str) -> str | None:
        """GET ``/latest/meta-data/<path>``.

        Parameters
        ----------
        path
            Path under ``/latest/meta-data/``.

        Returns
        -------
        str or None
            The body, or None when the service answers 404 (a notice that does not exist).

        Raises
        ------
        ImdsError
            When the service is unreachable or answers anything but 200 / 404.
        """
        full = "/latest/meta-data/" + path.lstrip("/")
        status, body = self._request("GET", full, {"X-aws-ec2-metadata-token": self._session_token()})
        if status == 401:  # token expired or the service restarted: one fresh token, one more try
            status, body = self._request(
                "GET", full, {"X-aws-ec2-metadata-token": self._session_token(refresh=True)}
            )
        if status == 404:
            return None
        if status != 200:
            raise ImdsError(f"IMDS GET {full} answered {status}")
        return body.decode()

    def _required(self, path: str) -> str:
        value = self.get(path)
        if value is None:
            raise ImdsError(f"IMDS has no {path}")
        return value.strip()

    def instance_id(self) -> str:
        """The instance id, ``i-...``."""
        return self._required("instance-id")

    def instance_type(self) -> str:
        """The instance type, e.g. ``g5.xlarge``."""
        return self._required("instance-type")

    def local_ipv4(self) -> str:
        """The instance's private IPv4 address, e.g. ``10.0.1.12`` (its primary network interface's)."""
        return self._required("local-ipv4")

    def availability_zone(self) -> str:
        """The availability zone, e.g. ``us-east-1a``."""
        return self._required("placement/availability-zone")

    def region(self) -> str:
        """The region, e.g. ``us-east-1``."""
        return self._required("placement/region")

    def spot_instance_action(self) -> SpotInstanceAction | None:
        """The pending spot interruption, or None when there is none."""
        raw = self.get("spot/instance-action")
        if raw is None:
            return None
        try:
            document = json.loads(raw)
        except ValueError:
            document = {}
        if not isinstance(document, dict):
            document = {}
        return SpotInstanceAction(
            action=str(document.get("action", "terminate")), time=parse_time(document.get("time"))
        )

    def rebalance_recommendation(self) -> RebalanceRecommendation | None:
        """The rebalance recommendation, or None when there is none."""
        raw = self.get("events/recommendations/rebalance")
        if raw is None:
            return None
        try:
            document = json.loads(raw)
        except ValueError:
            document = {}
        notice_time = document.get("noticeTime") if isinstance(document, dict) else None
        return RebalanceRecommendation(notice_time=parse_time(notice_time))

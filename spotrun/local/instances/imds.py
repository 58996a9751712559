"""A local EC2 instance metadata service (IMDSv2 only) for one simulated instance.

The agent reads the same paths it reads on EC2, at ``SPOTRUN_IMDS_ENDPOINT`` instead of 169.254.169.254:
a session token from ``PUT /latest/api/token`` first, then ``GET`` with that token. The spot notices are 404
until chaos sets them, as on EC2.

An instance launched with a role serves that role's temporary credentials at
``iam/security-credentials/<role-name>`` (the role's name at ``iam/security-credentials/``), as EC2 does
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-security-credentials.html); botocore's
instance-metadata provider reads them there when ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` points at this service.

It answers as EC2's does (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html,
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-v2-how-it-works.html): a directory lists its
entries one per line, a sub-directory with a trailing ``/``; the token path takes only ``PUT`` (405 otherwise); a
token request carrying ``X-Forwarded-For`` is refused (403), so a proxy or an SSRF relay cannot open a session.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from spotrun.local.loopback import LoopbackServer

TOKEN_PATH = "/latest/api/token"  # noqa: S105 - a URL path, not a secret
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"  # noqa: S105 - a header name
MAX_TOKEN_TTL = 21_600
CREDENTIALS_PATH = "/latest/meta-data/iam/security-credentials/"
# The trees a GET may list as directories; ``/latest/`` itself is left out (EC2 lists it without slashes).
LISTED_ROOTS = ("/latest/meta-data/", "/latest/dynamic/")
# The interruption actions for which EC2 also sets the legacy ``spot/termination-time``: "If your Spot Instance
# is marked to be stopped or terminated by Amazon EC2, the termination-time item is present in your instance
# metadata" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html).
TERMINATION_TIME_ACTIONS = ("stop", "terminate")


def zone_id_of(region: str, zone: str) -> str:
    """The zone id (e.g. ``use1-az1``) of ``zone``, from the table EC2's ``DescribeAvailabilityZones`` answers with.

    Zone names are mapped to ids per account on AWS; the emulator's one account uses moto's mapping, so IMDS and
    EC2 agree. Empty when the zone is unknown.
    """
    # At first use: the CLI imports this module's credentials where moto is not installed.
    from moto.ec2.models.availability_zones_and_regions import RegionsAndZonesBackend

    for known in RegionsAndZonesBackend.zones.get(region, []):
        if known.name == zone:
            return str(known.zone_id)
    return ""


@dataclass(frozen=True)
class RoleCredentials:
    """One instance's temporary credentials for its role, as IMDS hands them out."""

    role_name: str
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str = field(repr=False)
    expiration: datetime

    @classmethod
    def issue(cls, role_name: str, lifetime: timedelta = timedelta(hours=6)) -> RoleCredentials:
        """New random credentials (``ASIA`` keys, as STS issues for a role session)."""
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
        return cls(
            role_name=role_name,
            access_key_id="ASIA" + "".join(secrets.choice(alphabet) for _ in range(16)),
            secret_access_key=secrets.token_urlsafe(30),
            session_token=secrets.token_urlsafe(48),
            expiration=datetime.now(UTC) + lifetime,
        )

    def document(self) -> dict[str, str]:
        """The JSON document EC2 serves at ``iam/security-credentials/<role-name>``."""
        stamp = "%Y-%m-%dT%H:%M:%SZ"
        return {
            "Code": "Success",
            "LastUpdated": datetime.now(UTC).strftime(stamp),
            "Type": "AWS-HMAC",
            "AccessKeyId": self.access_key_id,
            "SecretAccessKey": self.secret_access_key,
            "Token": self.session_token,
            "Expiration": self.expiration.strftime(stamp),
        }


@dataclass
class InstanceMetadata:
    """What the metadata service of one instance answers; the notices change while it runs."""

    instance_id: str
    instance_type: str
    availability_zone: str
    lifecycle: str  # "spot" or "on-demand"
    region: str = "us-east-1"
    ami_id: str = ""
    local_ipv4: str = "10.0.0.10"
    instance_action: dict[str, str] | None = None  # {"action": ..., "time": ...}
    rebalance: dict[str, str] | None = None  # {"noticeTime": ...}
    credentials: RoleCredentials | None = None  # the instance profile's role, if launched with one
    availability_zone_id: str = ""  # e.g. use1-az1; looked up from the zone name when not given
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.availability_zone_id:
            self.availability_zone_id = zone_id_of(self.region, self.availability_zone)

    def set_instance_action(self, action: str, when: str) -> None:
        """Publish an interruption notice at ``spot/instance-action``."""
        with self._lock:
            self.instance_action = {"action": action, "time": when}

    def set_rebalance(self, notice_time: str) -> None:
        """Publish a rebalance recommendation at ``events/recommendations/rebalance``."""
        with self._lock:
            self.rebalance = {"noticeTime": notice_time}

    def lookup(self, path: str) -> tuple[int, str, str]:
        """Answer a GET of ``path`` as (status, content type, body): an item, a directory's listing, or 404."""
        items = self._items()
        path = path.split("?", 1)[0]
        if path in items:
            return items[path]
        listing = _listing(path, items)
        if listing is not None:
            return 200, "text/plain", listing
        return 404, "text/plain", "Not Found"

    def _items(self) -> dict[str, tuple[int, str, str]]:
        """Every item the service holds now, by full path, each as its (status, content type, body)."""
        with self._lock:
            action, rebalance = self.instance_action, self.rebalance
        meta = "/latest/meta-data/"
        text = {
            "instance-id": self.instance_id,
            "instance-type": self.instance_type,
            "instance-life-cycle": self.lifecycle,
            "placement/availability-zone": self.availability_zone,
            "placement/availability-zone-id": self.availability_zone_id,
            "placement/region": self.region,
            "ami-id": self.ami_id,
            "local-ipv4": self.local_ipv4,
            "hostname": f"ip-{self.local_ipv4.replace('.', '-')}.ec2.internal",
        }
        documents: dict[str, Any] = {}
        if action is not None:
            documents["spot/instance-action"] = action
            if action["action"] in TERMINATION_TIME_ACTIONS:
                text["spot/termination-time"] = action["time"]
        if rebalance is not None:
            documents["events/recommendations/rebalance"] = rebalance
        if self.credentials is not None:
            role = self.credentials.role_name
            documents[CREDENTIALS_PATH.removeprefix(meta) + role] = self.credentials.document()
        items = {meta + key: (200, "text/plain", value) for key, value in text.items() if value}
        items.update(
            {meta + key: (200, "application/json", json.dumps(value)) for key, value in documents.items()}
        )
        identity = {
            "instanceId": self.instance_id,
            "instanceType": self.instance_type,
            "availabilityZone": self.availability_zone,
            "region": self.region,
            "imageId": self.ami_id,
            "privateIp": self.local_ipv4,
        }
        items["/latest/dynamic/instance-identity/document"] = (200, "application/json", json.dumps(identity))
        return items


def _listing(path: str, items: dict[str, Any]) -> str | None:
    """The listing of the directory ``path`` (with or without its trailing ``/``), or None if it is not one.

    One entry a line; an entry that is itself a directory ends with ``/``, as EC2 lists them
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instancedata-data-retrieval.html).
    """
    directory = path.rstrip("/") + "/"
    if not any(directory.startswith(root) for root in LISTED_ROOTS):
        return None
    entries: set[str] = set()
    for item in items:
        if item.startswith(directory):
            head, slash, _ = item.removeprefix(directory).partition("/")
            entries.add(head + slash)
    return "\n".join(sorted(entries)) if entries else None


class _Handler(BaseHTTPRequestHandler):
    server: _ImdsHttpServer
    protocol_version = "HTTP/1.1"

    def do_PUT(self) -> None:
        if self.path != TOKEN_PATH:
            self._reply(404, "text/plain", "Not Found")
            return
        if "X-Forwarded-For" in self.headers:
            # IMDS refuses a token request that went through a proxy, so a forwarded (SSRF) request cannot open a
            # session (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-v2-how-it-works.html).
            self._reply(403, "text/plain", "Forbidden")
            return
        ttl = self.headers.get(TTL_HEADER, "")
        if not ttl.isdigit() or not 1 <= int(ttl) <= MAX_TOKEN_TTL:
            self._reply(400, "text/plain", "Bad Request")
            return
        self._reply(200, "text/plain", self.server.issue_token(int(ttl)))

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == TOKEN_PATH:
            self._method_not_allowed()
            return
        if not self.server.valid_token(self.headers.get(TOKEN_HEADER)):
            self._reply(401, "text/plain", "Unauthorized")
            return
        self._reply(*self.server.metadata.lookup(self.path))

    def _method_not_allowed(self) -> None:
        # The token path takes PUT only; EC2 answers any other method there with 405
        # (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-v2-how-it-works.html).
        self._reply(405, "text/plain", "Method Not Allowed")

    do_POST = do_DELETE = do_PATCH = _method_not_allowed  # noqa: N815 - http.server dispatches by these names

    def _reply(self, status: int, content_type: str, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        # The agent polls every few seconds; a line per request would bury the instance's own log.
        return


class _ImdsHttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], metadata: InstanceMetadata):
        super().__init__(address, _Handler)
        self.metadata = metadata
        self._tokens: dict[str, float] = {}
        self._lock = threading.Lock()

    def issue_token(self, ttl_seconds: int) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._tokens[token] = time.monotonic() + ttl_seconds
        return token

    def valid_token(self, token: str | None) -> bool:
        with self._lock:
            expiry = self._tokens.get(token or "")
        return expiry is not None and expiry > time.monotonic()


class ImdsServer(LoopbackServer):
    """The metadata service of one instance, on 127.0.0.1 and a free port, served from a daemon thread.

    Stopping it refuses later requests, as on a terminated instance; the tokens issued die with it.

    Parameters
    ----------
    metadata
        What the service answers.
    """

    def __init__(self, metadata: InstanceMetadata):
        super().__init__(lambda address: _ImdsHttpServer(address, metadata), f"imds-{metadata.instance_id}")
        self.metadata = metadata

    @property
    def endpoint(self) -> str:
        """Base URL of the service, e.g. ``http://127.0.0.1:40123``: the agent's ``SPOTRUN_IMDS_ENDPOINT``."""
        return self.url

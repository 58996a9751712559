"""Who may call the local API Gateway, and how a request's SigV4 signature is verified.

IAM authentication, as far as the agent route needs it: a request signed with SigV4 by credentials registered
in :class:`Callers` (each simulated instance's role session) is verified with the registered secret, and its
``requestContext.identity`` carries ``userArn``, ``caller``, ``user``, ``accessKey`` and ``accountId`` as API
Gateway fills them for an IAM-authorized method ("the ARN of the effective user identified after
authentication"; "the principal identifier of the caller that signed the request";
https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-mapping-template-reference.html).
For a role session, ``userArn`` is ``arn:aws:sts::<account>:assumed-role/<role>/<session>`` and ``caller``
``<role-id>:<session>``; EC2 names an instance's session after the instance (IAM's ``aws:userid`` is
``role-id:ec2-instance-id``; https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html).
A signature that does not verify is refused 403, as API Gateway refuses it before the function.

Every route is IAM-authorised, as deployed (``AuthorizationType: AWS_IAM``), so a request must be signed by a
key the stand-in knows: an instance's role session (:class:`Callers`) or one of the runtime's user keys
(:data:`LOCAL_USERS`, the administrative keys the CLI and the AWS CLI use against ``spotrun local up``; their
identity is an IAM user's). API Gateway answers an unsigned request ``403 {"message": "Missing Authentication
Token"}`` and one signed with an unknown key ``403 {"message": "The security token included in the request is
invalid."}`` before any function runs
(https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-control-access-using-iam-policies-to-invoke-api.html,
https://repost.aws/knowledge-center/api-gateway-authentication-token-errors); so does the stand-in.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import parse_qs

from spotrun.local.instances.imds import RoleCredentials
from spotrun.local.server import ACCOUNT_ID, FAKE_CREDENTIALS

_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/,\s]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/"
    r"aws4_request,\s*SignedHeaders=(?P<signed>[^,\s]+),\s*Signature=(?P<signature>[0-9a-f]{64})$"
)


# The runtime's user keys, by access key id: the secret, and the IAM user API Gateway names as their signer.
LOCAL_USERS: Mapping[str, tuple[str, str]] = {
    FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"]: (FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"], "spotrun-local"),
}
MISSING_TOKEN = "Missing Authentication Token"  # noqa: S105 - API Gateway's message, not a secret
INVALID_TOKEN = "The security token included in the request is invalid."  # noqa: S105 - a message


class SignatureMismatch(Exception):
    """A request signed with registered keys whose signature does not verify (API Gateway answers 403)."""


class Unauthenticated(Exception):
    """A request API Gateway refuses before the function: unsigned, or signed by a key it does not know."""


def local_user_credentials() -> tuple[str, str]:
    """The access key id and secret a user of ``spotrun local up`` signs its API requests with (SigV4)."""
    return FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"], FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]


def user_identity(
    method: str,
    path: str,
    query: str,
    headers: dict[str, str],
    body: bytes,
    users: Mapping[str, tuple[str, str]],
) -> dict[str, str | None]:
    """The ``identity`` of a request signed by one of ``users`` (an IAM user's, as API Gateway fills it).

    Raises
    ------
    Unauthenticated
        When the request carries no signature, or a key that is not one of ``users``.
    SignatureMismatch
        When a user's key signed it but the signature does not verify.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    authorization = lowered.get("authorization", "")
    if not authorization and "X-Amz-Signature" not in parse_qs(query):
        raise Unauthenticated(MISSING_TOKEN)
    match = _AUTHORIZATION.match(authorization)
    if match is None or match["key"] not in users:
        raise Unauthenticated(INVALID_TOKEN)
    secret, name = users[match["key"]]
    if match["service"] != "execute-api":
        raise SignatureMismatch("the credential scope does not name execute-api")
    signer = RoleCredentials(name, match["key"], secret, "", datetime.max.replace(tzinfo=UTC))
    expected = _signature(method, path, query, lowered, body, match, signer)
    if not hmac.compare_digest(expected, match["signature"]):
        raise SignatureMismatch("the request signature we calculated does not match the signature provided")
    user_id = "AIDA" + hashlib.sha256(name.encode()).hexdigest()[:17].upper()
    return {
        "accessKey": match["key"],
        "accountId": ACCOUNT_ID,
        "caller": user_id,
        "user": user_id,
        "userArn": f"arn:aws:iam::{ACCOUNT_ID}:user/{name}",
    }


@dataclass(frozen=True)
class RoleSession:
    """Registered credentials and the identity API Gateway gives their signer."""

    credentials: RoleCredentials
    user_arn: str
    caller: str


@dataclass
class Callers:
    """Credentials the stand-in authenticates: each simulated instance's role session."""

    account_id: str = ACCOUNT_ID
    # The emulator's clock (spotrun.local.clock.Clock.now): a session expires by it.
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC), repr=False)
    _sessions: dict[str, RoleSession] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def register_instance(self, instance_id: str, credentials: RoleCredentials) -> None:
        """Register an instance's role session: EC2 names the session after the instance."""
        role = credentials.role_name
        role_id = "AROA" + hashlib.sha256(role.encode()).hexdigest()[:17].upper()
        session = RoleSession(
            credentials=credentials,
            user_arn=f"arn:aws:sts::{self.account_id}:assumed-role/{role}/{instance_id}",
            caller=f"{role_id}:{instance_id}",
        )
        with self._lock:
            self._sessions[credentials.access_key_id] = session

    def session(self, access_key_id: str) -> RoleSession | None:
        """The registered instance role session of ``access_key_id``, if any (:mod:`spotrun.local.iam`)."""
        with self._lock:
            return self._sessions.get(access_key_id)

    def identity(
        self, method: str, path: str, query: str, headers: dict[str, str], body: bytes
    ) -> dict[str, str | None]:
        """The ``identity`` fields of an authenticated request; empty when it is not signed by a known key.

        Raises
        ------
        SignatureMismatch
            When a registered key signed it but the signature, session token or date does not verify.
        """
        lowered = {name.lower(): value for name, value in headers.items()}
        match = _AUTHORIZATION.match(lowered.get("authorization", ""))
        if match is None:
            return {}
        with self._lock:
            session = self._sessions.get(match["key"])
        if session is None:
            return {}
        credentials = session.credentials
        if not hmac.compare_digest(lowered.get("x-amz-security-token", ""), credentials.session_token):
            raise SignatureMismatch("the security token included in the request is invalid")
        if match["service"] != "execute-api" or self.now() > credentials.expiration:
            raise SignatureMismatch("the credential scope or expiry does not fit")
        expected = _signature(method, path, query, lowered, body, match, credentials)
        if not hmac.compare_digest(expected, match["signature"]):
            raise SignatureMismatch(
                "the request signature we calculated does not match the signature provided"
            )
        return {
            "accessKey": credentials.access_key_id,
            "accountId": self.account_id,
            "caller": session.caller,
            "user": session.caller,
            "userArn": session.user_arn,
        }


def _signature(
    method: str,
    path: str,
    query: str,
    headers: dict[str, str],
    body: bytes,
    match: re.Match[str],
    credentials: RoleCredentials,
) -> str:
    """Recompute the request's SigV4 signature with the registered secret (botocore's canonical form)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    stamp = headers.get("x-amz-date", "")
    names = match["signed"].split(";")
    if "host" not in names or any(name not in headers for name in names):
        raise SignatureMismatch("a signed header is missing")
    url = f"http://{headers['host']}{path}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, data=body, headers={name: headers[name] for name in names})
    request.context["timestamp"] = stamp
    auth = SigV4Auth(
        Credentials(credentials.access_key_id, credentials.secret_access_key, credentials.session_token),
        match["service"],
        match["region"],
    )
    return str(auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request))

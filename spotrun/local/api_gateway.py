"""API Gateway's REST proxy integration, in miniature: HTTP requests become proxy events for the API handler.

:class:`ProxyApp` is a WSGI application (the property-based API tests call it in process); :class:`ApiServer`
serves it on 127.0.0.1 so that ``curl`` works against ``spotrun local up`` and the agents report to it.

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

import base64
import hashlib
import hmac
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from spotrun.local.imds import RoleCredentials
from spotrun.local.lambda_patch import Handler, LambdaContext
from spotrun.local.loopback import LoopbackServer
from spotrun.local.server import ACCOUNT_ID, FAKE_CREDENTIALS
from spotrun.model.api_paths import in_subtree

STAGE = "local"
MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's own payload limit


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


def rest_event(
    method: str,
    path: str,
    query: str,
    headers: dict[str, str],
    body: bytes,
    identity: dict[str, str | None] | None = None,
    *,
    resource: str = "/",
) -> dict[str, Any]:
    """The event API Gateway's REST proxy integration sends for one request.

    Parameters
    ----------
    method, path, query
        Request line: ``GET``, ``/jobs``, ``status=FAILED&limit=5`` (query not decoded yet).
    headers
        Request headers, as sent.
    body
        Request body; non-UTF-8 bytes are passed base64-encoded, as API Gateway does for binary media.
    identity
        The authenticated caller's fields (:meth:`Callers.identity`); None or empty: no IAM identity.
    resource
        The resource whose ``ANY`` method takes ``path`` itself and whose ``{proxy+}`` child takes every path
        beneath it: the root, or a subtree routed to another function. The event names the one that matched and
        the part of the path its ``{proxy+}`` stood for.
    """
    multi_query = parse_qs(query, keep_blank_values=True) or None
    base = resource.rstrip("/")
    if path.rstrip("/") == base:
        matched, parameters = resource, None
    else:
        matched, parameters = f"{base}/{{proxy+}}", {"proxy": path[len(base) + 1 :]}
    try:
        text, encoded = body.decode(), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode(), True
    request_id = str(uuid.uuid4())
    return {
        "resource": matched,
        "path": path,
        "httpMethod": method,
        "headers": headers or None,
        "multiValueHeaders": {name: [value] for name, value in headers.items()} or None,
        "queryStringParameters": {k: v[-1] for k, v in multi_query.items()} if multi_query else None,
        "multiValueQueryStringParameters": multi_query,
        "pathParameters": parameters,
        "stageVariables": None,
        "requestContext": {
            "accountId": ACCOUNT_ID,
            "apiId": "local",
            "stage": STAGE,
            "requestId": request_id,
            "extendedRequestId": request_id,
            "httpMethod": method,
            "path": f"/{STAGE}{path}",
            "resourcePath": matched,
            "protocol": "HTTP/1.1",
            "requestTimeEpoch": int(time.time() * 1000),
            "identity": {
                "accessKey": None,
                "accountId": None,
                "caller": None,
                "user": None,
                "userArn": None,
                **(identity or {}),
                "sourceIp": "127.0.0.1",
                "userAgent": headers.get("User-Agent", ""),
            },
        },
        "body": text or None,
        "isBase64Encoded": encoded,
    }


def _context(function_name: str) -> LambdaContext:
    return LambdaContext(
        function_name=function_name,
        function_version="$LATEST",
        invoked_function_arn=f"arn:aws:lambda:us-east-1:{ACCOUNT_ID}:function:{function_name}",
        memory_limit_in_mb=512,
        aws_request_id=str(uuid.uuid4()),
        log_group_name=f"/aws/lambda/{function_name}",
        log_stream_name="local",
        timeout_seconds=30.0,
    )


class ProxyApp:
    """WSGI application: each request becomes a REST proxy event for its function's handler, its answer the response.

    Parameters
    ----------
    handler, function_name
        The function every path goes to that no subtree claims.
    callers
        The registered role sessions (IAM identities).
    users
        The user keys the stand-in authenticates besides the role sessions (:data:`LOCAL_USERS`).
    subtrees
        Path (``/agent``) -> the handler and function name that serve it and every path beneath it, as API Gateway
        routes a resource and its ``{proxy+}`` child (:func:`spotrun.model.api_paths.in_subtree`).
    """

    def __init__(
        self,
        handler: Handler,
        function_name: str = "spotrun-api",
        callers: Callers | None = None,
        subtrees: Mapping[str, tuple[Handler, str]] | None = None,
        users: Mapping[str, tuple[str, str]] = LOCAL_USERS,
    ):
        self.handler = handler
        self.users = dict(users)
        self.function_name = function_name
        self.callers = callers if callers is not None else Callers()
        self.subtrees = dict(subtrees or {})

    def target(self, path: str) -> tuple[Handler, str, str]:
        """What a request for ``path`` reaches: the handler, its function's name, its resource (``/`` or a subtree)."""
        for prefix, (handler, name) in self.subtrees.items():
            if in_subtree(path, prefix):
                return handler, name, prefix
        return self.handler, self.function_name, "/"

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length > MAX_BODY_BYTES:
            start_response("413 Payload Too Large", [("Content-Type", "application/json")])
            return [b'{"message": "Request Too Long"}']
        body = environ["wsgi.input"].read(length) if length else b""
        headers = {
            key[5:].replace("_", "-").title(): str(value)
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        if environ.get("CONTENT_TYPE"):
            headers["Content-Type"] = environ["CONTENT_TYPE"]
        path = environ.get("PATH_INFO") or "/"
        # WSGI decodes the path as latin-1; API Gateway hands over UTF-8.
        path = path.encode("latin-1").decode("utf-8", errors="replace")
        method, query = environ["REQUEST_METHOD"], environ.get("QUERY_STRING", "")
        if environ.get("HTTP_HOST"):
            headers["Host"] = environ["HTTP_HOST"]
        try:
            identity = self.callers.identity(method, path, query, headers, body) or user_identity(
                method, path, query, headers, body, self.users
            )
        except (SignatureMismatch, Unauthenticated) as exc:
            start_response("403 Forbidden", [("Content-Type", "application/json")])
            return [json.dumps({"message": str(exc)}).encode()]
        handler, function_name, resource = self.target(path)
        event = rest_event(method, path, query, headers, body, identity, resource=resource)
        answer = handler(event, _context(function_name))
        status = int(answer.get("statusCode", 200))
        out = answer.get("body") or ""
        payload = base64.b64decode(out) if answer.get("isBase64Encoded") else out.encode()
        response_headers = [(name, str(value)) for name, value in (answer.get("headers") or {}).items()]
        for name, values in (answer.get("multiValueHeaders") or {}).items():
            response_headers += [(name, str(value)) for value in values]
        start_response(f"{status} {HTTPStatus(status).phrase}", response_headers)
        return [payload]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    # socketserver's default backlog of 5 resets connections under a burst of parallel requests.
    request_queue_size = 256


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged to stderr (the handler logs what matters)."""


class ApiServer(LoopbackServer):
    """Serve a :class:`ProxyApp` on 127.0.0.1 in a background thread.

    Parameters
    ----------
    app
        What to serve.
    port
        Port to bind; 0 for a free one.
    """

    def __init__(self, app: ProxyApp, port: int = 0):
        super().__init__(
            lambda address: make_server(*address, app, _ThreadingServer, _QuietHandler), "local-api", port
        )

"""API Gateway's REST proxy integration, in miniature: HTTP requests become proxy events for the API handler.

:class:`ProxyApp` is a WSGI application (the property-based API tests call it in process); :class:`ApiServer`
serves it on 127.0.0.1 so that ``curl`` works against ``spotrun local up`` and the agents report to it.

Every route is IAM-authorised, as deployed: :mod:`spotrun.local.api.auth` says who may call and how a
request is verified.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from spotrun.local.api.auth import LOCAL_USERS, Callers, SignatureMismatch, Unauthenticated, user_identity
from spotrun.local.loopback import LoopbackServer
from spotrun.local.patches.lambda_invoke import Handler, LambdaContext
from spotrun.local.server import ACCOUNT_ID
from spotrun.model.agent_protocol.api_paths import in_subtree

STAGE = "local"
MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's own payload limit


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
        routes a resource and its ``{proxy+}`` child (:func:`spotrun.model.agent_protocol.api_paths.in_subtree`).
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

"""API Gateway's REST proxy integration, in miniature: HTTP requests become proxy events for the API handler.

:class:`ProxyApp` is a WSGI application (the property-based API tests call it in process); :class:`ApiServer`
serves it on 127.0.0.1 so that ``curl`` works against ``spotrun local up``. No IAM authentication is done
locally: API Gateway does that in AWS, before the function is called.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable, Iterable
from http import HTTPStatus
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from spotrun.local.lambda_patch import Handler, LambdaContext
from spotrun.local.loopback import LoopbackServer
from spotrun.local.server import ACCOUNT_ID

STAGE = "local"
MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's own payload limit


def rest_event(method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """The event API Gateway's REST ``{proxy+}`` integration sends for one request.

    Parameters
    ----------
    method, path, query
        Request line: ``GET``, ``/jobs``, ``status=FAILED&limit=5`` (query not decoded yet).
    headers
        Request headers, as sent.
    body
        Request body; non-UTF-8 bytes are passed base64-encoded, as API Gateway does for binary media.
    """
    multi_query = parse_qs(query, keep_blank_values=True) or None
    try:
        text, encoded = body.decode(), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode(), True
    request_id = str(uuid.uuid4())
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": headers or None,
        "multiValueHeaders": {name: [value] for name, value in headers.items()} or None,
        "queryStringParameters": {k: v[-1] for k, v in multi_query.items()} if multi_query else None,
        "multiValueQueryStringParameters": multi_query,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "accountId": ACCOUNT_ID,
            "apiId": "local",
            "stage": STAGE,
            "requestId": request_id,
            "extendedRequestId": request_id,
            "httpMethod": method,
            "path": f"/{STAGE}{path}",
            "resourcePath": "/{proxy+}",
            "protocol": "HTTP/1.1",
            "requestTimeEpoch": int(time.time() * 1000),
            "identity": {"sourceIp": "127.0.0.1", "userAgent": headers.get("User-Agent", "")},
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
    """WSGI application: each request becomes a REST proxy event for ``handler``, its answer the response."""

    def __init__(self, handler: Handler, function_name: str = "spotrun-api"):
        self.handler = handler
        self.function_name = function_name

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
        event = rest_event(environ["REQUEST_METHOD"], path, environ.get("QUERY_STRING", ""), headers, body)
        answer = self.handler(event, _context(self.function_name))
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

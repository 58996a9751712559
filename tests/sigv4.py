"""Requests to the local API Gateway stand-in signed as a user of ``spotrun local up`` signs them (SigV4).

Every route of the API is IAM-authorised: the stand-in refuses an unsigned request 403 "Missing Authentication
Token", as API Gateway does. Tests call it as the CLI does, with the runtime's user keys.
"""

from __future__ import annotations

import io
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from spotrun.cli.client import SpotrunClient
from spotrun.local.api.auth import local_user_credentials

REGION = "us-east-1"


def user_credentials() -> Credentials:
    """The runtime's user keys, as botocore credentials."""
    key, secret = local_user_credentials()
    return Credentials(key, secret)


def signed_headers(
    method: str, url: str, body: bytes = b"", headers: dict[str, str] | None = None, credentials: Any = None
) -> dict[str, str]:
    """``headers`` with SigV4's (``Authorization``, ``X-Amz-Date``) for ``execute-api``."""
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
    SigV4Auth(credentials or user_credentials(), "execute-api", REGION).add_auth(request)
    return dict(request.headers.items())


def signed_request(
    url: str, method: str = "GET", data: bytes | None = None, headers: dict[str, str] | None = None
) -> urllib.request.Request:
    """A ``urllib`` request signed with the runtime's user keys."""
    return urllib.request.Request(  # noqa: S310 - the local stand-in
        url, data=data, method=method, headers=signed_headers(method, url, data or b"", headers)
    )


def local_client(api_url: str) -> SpotrunClient:
    """The CLI's client of the local API, signing as the CLI does."""
    return SpotrunClient(api_url, credentials=user_credentials(), region=REGION)


class SigningMiddleware:
    """A WSGI application that signs each request (as its client would have) before ``app`` serves it."""

    def __init__(self, app: Callable[..., Iterable[bytes]]):
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        host = (
            environ.get("HTTP_HOST")
            or f"{environ.get('SERVER_NAME', 'localhost')}:{environ.get('SERVER_PORT', '80')}"
        )
        environ["HTTP_HOST"] = host
        path = (environ.get("PATH_INFO") or "/").encode("latin-1").decode("utf-8", errors="replace")
        query = environ.get("QUERY_STRING", "")
        # As the stand-in reads it: the decoded path (WSGI's PATH_INFO), the query as sent.
        url = f"http://{host}{path}" + (f"?{query}" if query else "")
        for name, value in signed_headers(environ["REQUEST_METHOD"], url, body).items():
            if name.lower() in ("authorization", "x-amz-date"):
                environ["HTTP_" + name.upper().replace("-", "_")] = value
        return self.app(environ, start_response)

"""The local API Gateway refuses what API Gateway refuses before an IAM-authorised method's function runs.

https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-control-access-using-iam-policies-to-invoke-api.html
"""

from __future__ import annotations

import io
import json
from typing import Any

from botocore.credentials import Credentials

from spotrun.local.api.gateway import ProxyApp
from tests.sigv4 import signed_headers

HOST = "127.0.0.1:8080"


def _recording(seen: list[dict[str, Any]]) -> Any:
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        seen.append(event)
        return {"statusCode": 200, "body": json.dumps({"ok": True})}

    return handler


def _send(app: ProxyApp, headers: dict[str, str], path: str = "/jobs") -> tuple[str, dict[str, Any]]:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "HTTP_HOST": HOST,
        "wsgi.input": io.BytesIO(b""),
    }
    environ.update({"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers.items()})
    answer: list[str] = []
    body = b"".join(app(environ, lambda status, _headers: answer.append(status)))
    return answer[0], json.loads(body)


def test_an_unsigned_request_is_refused_before_the_function() -> None:
    # Given the stand-in in front of a function
    seen: list[dict[str, Any]] = []
    app = ProxyApp(_recording(seen))

    # When a user route is called without a signature
    status, body = _send(app, {})

    # Then API Gateway's answer comes back and the function never runs
    assert status == "403 Forbidden"
    assert body == {"message": "Missing Authentication Token"}
    assert seen == []


def test_a_request_signed_with_an_unknown_key_is_refused() -> None:
    # Given a request signed with keys nobody issued
    seen: list[dict[str, Any]] = []
    app = ProxyApp(_recording(seen))
    headers = signed_headers(
        "GET", f"http://{HOST}/jobs", credentials=Credentials("AKIAUNKNOWN000000000", "x")
    )

    # When it is sent
    status, body = _send(app, headers)

    # Then it is refused as API Gateway refuses an unknown key
    assert status == "403 Forbidden"
    assert body == {"message": "The security token included in the request is invalid."}
    assert seen == []


def test_the_users_key_with_a_wrong_secret_is_refused() -> None:
    # Given a request signed with the runtime's user key but another secret
    seen: list[dict[str, Any]] = []
    app = ProxyApp(_recording(seen))
    headers = signed_headers(
        "GET", f"http://{HOST}/jobs", credentials=Credentials("testing", "not-the-secret")
    )

    # When it is sent
    status, body = _send(app, headers)

    # Then the signature does not verify
    assert status == "403 Forbidden"
    assert "signature" in body["message"]
    assert seen == []


def test_a_request_signed_with_the_users_keys_reaches_the_function_as_that_user() -> None:
    # Given a request signed as the CLI signs it against spotrun local up
    seen: list[dict[str, Any]] = []
    app = ProxyApp(_recording(seen))
    headers = signed_headers("GET", f"http://{HOST}/jobs")

    # When it is sent
    status, body = _send(app, headers)

    # Then the function runs, and API Gateway's identity names the IAM user that signed
    assert (status, body) == ("200 OK", {"ok": True})
    identity = seen[0]["requestContext"]["identity"]
    assert identity["accessKey"] == "testing"
    assert identity["userArn"] == "arn:aws:iam::123456789012:user/spotrun-local"

"""The REST API's OpenAPI document, generated from the API function's resolver into ``openapi.json``.

``python -m functions.api.openapi`` (``make openapi``) rewrites the file; ``tests/unit/test_openapi.py`` fails when the
committed file differs from what the code generates.
"""

from __future__ import annotations

import json
import sys

from spotrun.shape import REPO_ROOT

OPENAPI_FILE = REPO_ROOT / "openapi.json"
TITLE = "spotrun jobs API"
VERSION = "1.0.0"


def generate() -> str:
    """The OpenAPI document as pretty-printed JSON text, ending with a newline."""
    from aws_lambda_powertools.event_handler.openapi.models import APIKey, APIKeyIn

    from functions.api.app import app

    document = app.get_openapi_json_schema(
        title=TITLE,
        version=VERSION,
        description=(
            "Submit, list, show and cancel spotrun training jobs; tail their logs; restore archived models. "
            "Served by API Gateway with IAM authorization: sign every request with SigV4 "
            "(service execute-api)."
        ),
        security_schemes={
            "sigv4": APIKey(
                name="Authorization",
                in_=APIKeyIn.header,
                description="AWS Signature Version 4 (API Gateway AuthorizationType AWS_IAM).",
            )
        },
        security=[{"sigv4": []}],
    )
    return json.dumps(json.loads(document), indent=2, sort_keys=True) + "\n"


def main() -> None:
    """Write ``openapi.json`` at the repository root."""
    OPENAPI_FILE.write_text(generate(), encoding="utf-8")
    sys.stdout.write(f"wrote {OPENAPI_FILE}\n")


if __name__ == "__main__":
    main()

"""The REST API's OpenAPI document, generated from the two API functions' resolvers into ``openapi.json``.

The users' routes (:mod:`functions.api.app`) and the agents' (:mod:`functions.api.agent_app`) are one API behind
one stage: their documents are merged into one, and a path or a schema both define differently is an error.

``python -m functions.api.openapi`` (``make openapi``) rewrites the file; ``tests/unit/test_openapi.py`` fails when the
committed file differs from what the code generates.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from spotrun.shape import REPO_ROOT

OPENAPI_FILE = REPO_ROOT / "openapi.json"
TITLE = "spotrun jobs API"
VERSION = "1.0.0"


def generate() -> str:
    """The OpenAPI document as pretty-printed JSON text, ending with a newline."""
    from functions.api import agent_app, app

    documents = [json.loads(_document(module.app)) for module in (app, agent_app)]
    return json.dumps(without_empty_content(merge(*documents)), indent=2, sort_keys=True) + "\n"


def without_empty_content(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with no ``content: {}`` on a response: a response without a body has no ``content``.

    A route declares a bodiless answer (a 204) with ``"content": {}``, or Powertools would document its ``None``
    return as a JSON ``null`` body; OpenAPI says "no body" by leaving ``content`` out
    (https://spec.openapis.org/oas/v3.1.0#response-object).
    """
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for response in operation.get("responses", {}).values():
                if response.get("content") == {}:
                    del response["content"]
    return document


def _document(resolver: Any) -> str:
    from aws_lambda_powertools.event_handler.openapi.models import APIKey, APIKeyIn

    document: str = resolver.get_openapi_json_schema(
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
    return document


def merge(first: dict[str, Any], *others: dict[str, Any]) -> dict[str, Any]:
    """One OpenAPI document of several of the same API: their paths and components side by side.

    Parameters
    ----------
    first
        A document; everything but its paths and components (title, servers, security) is the merged one's.
    others
        More documents of the same API.

    Returns
    -------
    dict[str, Any]
        The merged document.

    Raises
    ------
    ValueError
        When two documents define one path, or one component under the same name differently.
    """
    merged = json.loads(json.dumps(first))
    for other in others:
        for path, item in other.get("paths", {}).items():
            if path in merged.setdefault("paths", {}):
                raise ValueError(f"two functions serve the path {path}")
            merged["paths"][path] = item
        for kind, named in other.get("components", {}).items():
            into = merged.setdefault("components", {}).setdefault(kind, {})
            for name, definition in named.items():
                if into.setdefault(name, definition) != definition:
                    raise ValueError(f"the component {kind}/{name} differs between the functions' documents")
    return merged


def main() -> None:
    """Write ``openapi.json`` at the repository root."""
    OPENAPI_FILE.write_text(generate(), encoding="utf-8")
    sys.stdout.write(f"wrote {OPENAPI_FILE}\n")


if __name__ == "__main__":
    main()

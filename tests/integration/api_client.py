"""Calls of the API function as API Gateway's REST proxy integration makes them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from functions.api import app as api
from spotrun.local.api.gateway import rest_event

TINY = {"name": "tiny", "training": {"command": ["python", "train.py"]}}


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str]


def call(
    context: Any,
    method: str,
    path: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    query: str = "",
) -> Answer:
    raw = body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    result = api.handler(rest_event(method, path, query, all_headers, raw), context)
    text = result.get("body") or "null"
    return Answer(result["statusCode"], json.loads(text), dict(result.get("headers") or {}))

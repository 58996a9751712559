"""A handler that keeps module state, as handlers do, for the execution-environment tests."""

from __future__ import annotations

import time
from typing import Any

calls: list[Any] = []  # one list per execution environment


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    calls.append(event)
    time.sleep(event.get("hold", 0))
    return {"environment": globals().get("__lambda_environment__"), "calls": len(calls)}

"""Lambda without Docker: moto's one invocation point calls the handler in this process.

Every Lambda call in moto (Step Functions tasks, EventBridge targets, direct ``Invoke``) goes through
``LambdaFunction._invoke_lambda(self, event) -> (payload, errored, logs)``. The replacement imports the
function's handler and calls it with the event and a Lambda context, on the calling thread. Handlers therefore
run concurrently and share the one process environment the runtime sets up.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import BaseModel

from spotrun.local.patches import PatchSet

logger = logging.getLogger(__name__)

Handler = Callable[[Any, Any], Any]


@dataclass
class LambdaContext:
    """The attributes of the Lambda Python runtime's context object that handlers and Powertools read."""

    function_name: str
    function_version: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    aws_request_id: str
    log_group_name: str
    log_stream_name: str
    timeout_seconds: float
    identity: Any = None
    client_context: Any = None
    _started: float = field(default_factory=time.monotonic, repr=False)

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the function's timeout."""
        left = self.timeout_seconds - (time.monotonic() - self._started)
        return max(0, int(left * 1000))


class HandlerRegistry:
    """Which handler serves which deployed function.

    A function not registered here falls back to the ``Handler`` it was created with in moto, imported as a
    dotted ``module.attribute`` path.
    """

    def __init__(self) -> None:
        self._handlers: dict[str, str | Handler] = {}
        self._lock = threading.Lock()

    def register(self, function_name: str, handler: str | Handler) -> None:
        """Serve ``function_name`` with ``handler`` (a dotted path or a callable)."""
        with self._lock:
            self._handlers[function_name] = handler

    def resolve(self, function_name: str, default: str) -> Handler:
        """Return the callable serving ``function_name``, importing it when given as a dotted path."""
        with self._lock:
            handler = self._handlers.get(function_name, default)
        if callable(handler):
            return handler
        return import_handler(handler)


def import_handler(dotted: str) -> Handler:
    """Import ``module.attribute`` (e.g. ``functions.submit.handler``) and return the attribute."""
    module_name, _, attribute = dotted.rpartition(".")
    if not module_name:
        raise ImportError(f"handler {dotted!r} is not of the form module.attribute")
    handler = getattr(importlib.import_module(module_name), attribute)
    if not callable(handler):
        raise TypeError(f"handler {dotted!r} is not callable")
    return cast(Handler, handler)


def _parse_event(event: Any) -> Any:
    # Step Functions hands over an already parsed dict; direct invokes and targets may pass JSON text.
    if isinstance(event, bytes | bytearray):
        event = event.decode()
    if isinstance(event, str):
        return json.loads(event) if event.strip() else {}
    return {} if event is None else event


def _to_json(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def error_payload(exc: BaseException) -> str:
    """The payload the Lambda Python runtime returns for an uncaught exception.

    ``errorType`` is the class ``__name__``; spotrun's errors set theirs to dotted names such as
    ``Capacity.Unavailable``, which Step Functions then matches in Retry and Catch.
    """
    return json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)})


def invoke_in_process(registry: HandlerRegistry, function: Any, event: Any) -> tuple[str, bool, str]:
    """Run the handler of a moto ``LambdaFunction`` on ``event``; return moto's (payload, errored, logs)."""
    try:
        handler = registry.resolve(function.function_name, function.handler)
        context = LambdaContext(
            function_name=function.function_name,
            function_version=str(function.version),
            invoked_function_arn=function.function_arn,
            memory_limit_in_mb=int(function.memory_size),
            aws_request_id=str(uuid.uuid4()),
            log_group_name=f"/aws/lambda/{function.function_name}",
            log_stream_name=f"{dt.datetime.now(dt.UTC):%Y/%m/%d}/[{function.version}]{uuid.uuid4().hex}",
            timeout_seconds=float(function.timeout),
        )
        result = handler(_parse_event(event), context)
    except Exception as exc:
        # Named errors are control flow for the workflow (e.g. Capacity.Unavailable): keep them quiet.
        logger.info("%s raised %s: %s", function.function_name, type(exc).__name__, exc)
        logger.debug("handler traceback", exc_info=True)
        return error_payload(exc), True, ""
    try:
        return json.dumps(result, default=_to_json), False, ""
    except (TypeError, ValueError) as exc:
        message = f"Unable to marshal response: {exc}"
        return json.dumps({"errorType": "Runtime.MarshalError", "errorMessage": message}), True, ""


def install(patches: PatchSet, registry: HandlerRegistry) -> None:
    """Route every moto Lambda invocation to :func:`invoke_in_process`."""
    from moto.awslambda.models import LambdaFunction

    def _invoke_lambda(self: Any, event: Any = None) -> tuple[str, bool, str]:
        return invoke_in_process(registry, self, event)

    patches.add(LambdaFunction, "_invoke_lambda", _invoke_lambda)

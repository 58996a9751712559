"""Lambda without Docker: moto's one invocation point calls the handler in this process.

Every Lambda call in moto (Step Functions tasks, EventBridge targets, direct ``Invoke``) goes through
``LambdaFunction._invoke_lambda(self, event) -> (payload, errored, logs)``. The replacement calls the
function's handler with the event and a Lambda context, on the calling thread, in one of the function's
**execution environments** (:class:`ExecutionEnvironments`).

On AWS each concurrent request of a function gets its own execution environment, and an environment serves one
request at a time: "For each concurrent request, Lambda provisions a separate instance of your execution
environment" (https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html). Module state (a
Powertools resolver's current event, a Router bound to it, anything a handler keeps between requests) is
therefore never seen by two requests at once. Here an environment is a fresh import of the handler's package
(``functions.*``) and of Powertools (which keeps the current request on class attributes), with module objects
of its own; the rest of the process (spotrun's core, pydantic, boto3, the environment variables the runtime
sets up) is shared, and holds no request state.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import gc
import importlib
import importlib.util
import itertools
import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, cast

from pydantic import BaseModel

from spotrun.local.patches.reversible import PatchSet

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


# Packages imported afresh in each environment: the deployment's handlers, and Powertools, which keeps request
# state on classes (the resolver's current event and Lambda context are ``BaseRouter`` class attributes, Metrics
# buffer on ``Metrics`` class attributes), so one import of it shared by concurrent requests crosses them.
ISOLATED_PACKAGES = ("functions", "aws_lambda_powertools")
# Environments one function may have at once. AWS throttles past the account's concurrency (1,000 by
# default); locally the bound caps memory and cold starts (about half a second of CPU each), and a request
# beyond it waits for an environment to be free.
MAX_ENVIRONMENTS = 8


class ExecutionEnvironments:
    """The execution environments of one function: each serves one invocation at a time.

    An invocation takes an idle environment, or a new one when all are busy (up to ``max_environments``, then
    it waits). A handler in one of ``packages`` (the deployment's ``functions``) is imported afresh for each
    environment, with those packages (:func:`fresh_handler`). Any other handler, a callable or a test module
    whose state the test reads, is one shared object and is called as it is.
    """

    def __init__(
        self,
        handler: str | Handler,
        max_environments: int = MAX_ENVIRONMENTS,
        packages: tuple[str, ...] = ISOLATED_PACKAGES,
    ):
        self._packages = packages
        self._handler = handler
        self._isolated = isinstance(handler, str) and _within(handler.rpartition(".")[0], packages)
        self._max = max_environments
        self._idle: list[Handler] = []
        self._count = 0
        self._changed = threading.Condition()

    @property
    def created(self) -> int:
        """How many environments were created (each a cold start)."""
        return self._count

    def __call__(self, event: Any, context: Any) -> Any:
        """Run one invocation in an environment no other invocation is using."""
        if callable(self._handler):
            return self._handler(event, context)
        if not self._isolated:
            return import_handler(self._handler)(event, context)
        handler = self._acquire()
        try:
            return handler(event, context)
        finally:
            with self._changed:
                self._idle.append(handler)
                self._changed.notify()

    def _acquire(self) -> Handler:
        with self._changed:
            while not self._idle and self._count >= self._max:
                self._changed.wait()
            if self._idle:
                return self._idle.pop()
            self._count += 1  # reserved before the (slow) import, so the bound holds under a burst
        try:
            return fresh_handler(cast(str, self._handler), self._packages)
        except BaseException:
            with self._changed:
                self._count -= 1
                self._changed.notify()
            raise


class HandlerRegistry:
    """Which handler serves which deployed function, each through its :class:`ExecutionEnvironments`.

    A function not registered here falls back to the ``Handler`` it was created with in moto, imported as a
    dotted ``module.attribute`` path.
    """

    def __init__(self) -> None:
        self._handlers: dict[str, ExecutionEnvironments] = {}
        self._lock = threading.Lock()

    def register(self, function_name: str, handler: str | Handler) -> None:
        """Serve ``function_name`` with ``handler`` (a dotted path or a callable), in new environments."""
        with self._lock:
            self._handlers[function_name] = ExecutionEnvironments(handler)

    def resolve(self, function_name: str, default: str) -> Handler:
        """Return the callable serving ``function_name`` (it runs each call in a free environment)."""
        with self._lock:
            if function_name not in self._handlers:
                self._handlers[function_name] = ExecutionEnvironments(default)
            return self._handlers[function_name]


def import_handler(dotted: str) -> Handler:
    """Import ``module.attribute`` (e.g. ``functions.submit.handler``) and return the attribute."""
    module_name, _, attribute = dotted.rpartition(".")
    if not module_name:
        raise ImportError(f"handler {dotted!r} is not of the form module.attribute")
    handler = getattr(importlib.import_module(module_name), attribute)
    if not callable(handler):
        raise TypeError(f"handler {dotted!r} is not callable")
    return cast(Handler, handler)


_environment_ids = itertools.count(1)
_SUFFIX = "@lambda-environment-"


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


def fresh_handler(dotted: str, packages: tuple[str, ...] = ISOLATED_PACKAGES) -> Handler:
    """Import ``module.attribute`` afresh: new module objects for every module of ``packages`` it imports.

    The modules are executed again, outside ``sys.modules``, with an ``__import__`` that hands them each
    other's fresh copies; every other import (spotrun's core, pydantic, boto3, the standard library) is the
    process's, as it holds no request state. This is one execution environment's module state.

    Parameters
    ----------
    dotted
        ``functions.api.app.handler``: the function's handler setting, a module within ``packages``.
    packages
        The packages (or modules) whose module state is the environment's own.

    Returns
    -------
    Handler
        The attribute of the fresh module.
    """
    module_name, _, attribute = dotted.rpartition(".")
    if not module_name:
        raise ImportError(f"handler {dotted!r} is not of the form module.attribute")
    environment = next(_environment_ids)
    modules: dict[str, ModuleType] = {}
    namespace = dict(builtins.__dict__)

    def load(name: str) -> ModuleType:
        if name in modules:
            return modules[name]
        parent, _, child = name.rpartition(".")
        parent_module = load(parent) if _within(parent, packages) else None
        found = importlib.util.find_spec(name)
        if found is None or found.origin is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        # Its own name in sys.modules, for what looks classes' modules up there (dataclasses, pydantic, typing);
        # ``__package__`` stays the real package, so relative imports resolve as they would.
        alias = f"{name}{_SUFFIX}{environment}"
        spec = importlib.util.spec_from_file_location(
            alias, found.origin, submodule_search_locations=found.submodule_search_locations
        )
        if spec is None or spec.loader is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        module = importlib.util.module_from_spec(spec)
        module.__dict__["__builtins__"] = namespace
        module.__dict__["__lambda_environment__"] = environment
        module.__package__ = name if found.submodule_search_locations is not None else parent
        sys.modules[alias] = module
        modules[name] = module
        if parent_module is not None:  # before it runs, so an import cycle finds it as sys.modules would
            setattr(parent_module, child, module)
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del modules[name]
            sys.modules.pop(module.__name__, None)
            raise
        return module

    def isolated_import(
        name: str,
        globals: dict[str, Any] | None = None,  # the signature of builtins.__import__
        locals: Any = None,
        fromlist: Any = (),
        level: int = 0,
    ) -> ModuleType:
        absolute = name
        if level:
            absolute = importlib.util.resolve_name("." * level + name, (globals or {}).get("__package__"))
        if not _within(absolute, packages):
            return cast(ModuleType, builtins.__import__(name, globals, locals, fromlist, level))
        module = load(absolute)
        for item in fromlist or ():
            if item != "*" and not hasattr(module, item) and hasattr(module, "__path__"):
                # ``from package import submodule``; when it is no submodule the statement raises ImportError
                with contextlib.suppress(ModuleNotFoundError):
                    load(f"{absolute}.{item}")
        if fromlist:
            return module
        top = absolute.partition(".")[0]
        return load(top) if _within(top, packages) else cast(ModuleType, builtins.__import__(top))

    namespace["__import__"] = isolated_import
    try:
        handler = getattr(load(module_name), attribute)
    finally:
        # The functions freeze every object there is once their import is done (functions.import_window): on AWS
        # an environment is a process of its own. Here it shares this process with moto's state, the other
        # environments and their requests, which must stay collectable: back into the oldest generation.
        gc.unfreeze()
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

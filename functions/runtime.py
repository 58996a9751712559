"""What every Lambda function shares: its entry point, the Powertools singletons, and its ports.

A handler is a function of its request and its function's :class:`Ports`, made the Lambda entry point
``handler(event, context)`` by :func:`function_handler`::

    @function_handler(ReleaseRequest)
    def handler(request: ReleaseRequest, aws: Ports) -> dict[str, Any]:
        return {"terminated": release_for_workflow(job_id=request.job_id, ..., store=aws.store, ...)}

The ports are those of the function :data:`spotrun.shape.SHAPE` declares with that handler (``functions/release.py``
holds the release function's), made on its first invocation in an execution environment (the cold start). The
settings the function declares are read and checked before its handler runs (the API's, by the first route that
needs them), so a deployment that lacks one fails that invocation naming the variable; each adapter is made on
first use and kept for the environment's life, as its boto3 client is (:func:`spotrun.aws.adapters.client`).
Nothing but the three Powertools objects is made at import.

Module state is the execution environment's: on AWS each environment imports this module once, and the emulator
imports ``functions`` afresh for each environment it creates (:mod:`spotrun.local.patches.lambda_invoke`), so no two
environments, and no two functions, share ports. Tests that call handlers in one process under a changing
environment call :func:`reset`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cached_property, partial, wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar, cast

from functions.import_window import collection_paused

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from pydantic import BaseModel

Request = TypeVar("Request")
R = TypeVar("R")

# Only the library the functions call AWS through is patched for X-Ray. Tracer's default (patch_all) imports, at
# every cold start, each library the X-Ray SDK can patch that is installed (requests, sqlite3, httpx, mysql...);
# nothing here uses them, and every AWS call goes through botocore, so every call is still traced. Patching
# "boto3" means patching botocore (aws_xray_sdk.core.patcher.patch). Powertools documents the narrowing:
# https://docs.aws.amazon.com/powertools/python/latest/core/tracer/, "Patching modules".
TRACED_MODULES = ("botocore",)

# Every handler imports this module before the rest of the project, and most of its cold start is these imports (boto3,
# pydantic, the job record's classes, the X-Ray SDK) and the Tracer's patching: the collector stays off while they
# run (functions.import_window).
with collection_paused():
    from aws_lambda_powertools import Logger, Metrics, Tracer

    from spotrun.aws.adapters import (
        CloudWatchLogEvents,
        Ec2Compute,
        EventBridgeEvents,
        SsmCommands,
        StepFunctionsWorkflows,
        StsJobAccess,
        client,
        forget_clients,
        job_store,
    )
    from spotrun.aws.objects import S3Objects
    from spotrun.aws.schedules import DynamoRunRecords, SchedulerSchedules
    from spotrun.aws.settings import Settings
    from spotrun.control.ports import (
        Commands,
        Compute,
        Events,
        JobAccess,
        JobStore,
        LogEvents,
        Objects,
        Schedules,
        Workflows,
    )
    from spotrun.control.schedules.run_records import RunRecords
    from spotrun.shape import METRICS_NAMESPACE, SERVICE_NAME, SHAPE

    logger = Logger(service=SERVICE_NAME)
    tracer = Tracer(service=SERVICE_NAME, patch_modules=TRACED_MODULES)
    metrics = Metrics(namespace=METRICS_NAMESPACE, service=SERVICE_NAME)

_ports: dict[str, Ports] = {}


class RawInvocation(NamedTuple):
    """An event as Lambda delivered it and its invocation's context: the request of a function that parses it itself.

    The API functions' (:func:`functions.api.gate.answer`): their resolver validates each route's parameters and
    body, and keeps the context (POST /jobs' idempotency reads the time the invocation has left).
    """

    event: dict[str, Any]
    context: LambdaContext


def function_handler(
    model: type[Request],
) -> Callable[[Callable[[Request, Ports], R]], Callable[[Any, LambdaContext], R]]:
    """Make ``handler(request, aws)`` its function's Lambda entry point ``handler(event, context)``.

    Around each invocation, outermost first: Powertools' Logger (the invocation's context in every log line),
    Tracer (the invocation traced, with the AWS calls it makes) and Metrics (what the handler added, flushed at
    its end; none is fine). Within them the event is validated into ``model``, then the handler gets it and the
    :class:`Ports` of the function :data:`spotrun.shape.SHAPE` declares with this handler: its module names it.

    The event is validated as Powertools' ``event_parser(model=)`` does (``model_validate``, or
    ``model_validate_json`` for a string), without importing its parser: ``aws_lambda_powertools.utilities.parser``
    imports ``pydantic.networks`` and ``importlib.metadata``, which no handler uses, at every cold start
    (``tests/unit/test_cold_start.py`` keeps it to the handlers whose event models come from it;
    docs/development/cold-start.md).

    Parameters
    ----------
    model
        The request's pydantic model; :class:`RawInvocation` hands over the event unparsed, with the context.

    Returns
    -------
    Callable
        The decorator.

    Raises
    ------
    LookupError
        At decoration, when no function of the shape has the decorated function as its handler (it would have
        no declared settings to read).
    pydantic.ValidationError
        At invocation, when the event does not match ``model``: raised before the function's settings are read
        and before the handler runs, under its own name, which a workflow's Catch routes on.
    spotrun.aws.settings.MissingSettings
        At invocation, when the environment lacks a setting the function declares: before the handler runs, or
        for :class:`RawInvocation` where the handler first reads :attr:`Ports.settings`.
    """

    def decorate(handler: Callable[[Request, Ports], R]) -> Callable[[Any, LambdaContext], R]:
        function = declared_function(handler)

        @logger.inject_lambda_context
        @tracer.capture_lambda_handler
        @metrics.log_metrics(raise_on_empty_metrics=False)
        @wraps(handler)
        def entry(event: Any, context: LambdaContext) -> R:
            if model is RawInvocation:
                # Its routes read the settings when they first need them: a missing one is answered as any
                # route's unexpected error (a 500), and a refusal before routing (a 405, a 413...) needs none.
                return handler(cast("Request", RawInvocation(event, context)), ports(function))
            parser = cast("type[BaseModel]", model)
            if isinstance(event, str | bytes):
                request = parser.model_validate_json(event)
            else:
                request = parser.model_validate(event)
            return handler(cast("Request", request), ports(function).checked())

        return entry

    return decorate


def declared_function(handler: Callable[..., Any]) -> str:
    """The name of the function :data:`spotrun.shape.SHAPE` declares with ``handler`` (``module.attribute``).

    Raises
    ------
    LookupError
        When no function has it.
    """
    # Its module's name as the shape writes it, from the package and the file: the emulator imports each
    # environment's modules under names of their own (spotrun.local.patches.lambda_invoke), keeping __package__.
    namespace = handler.__globals__
    dotted = f"{namespace['__package__']}.{Path(namespace['__file__']).stem}.{handler.__qualname__}"
    for spec in SHAPE.functions:
        if spec.handler == dotted:
            return spec.name
    raise LookupError(
        f"no function in spotrun.shape.SHAPE has the handler {dotted}: declare it, with its settings"
    )


_lock = threading.Lock()


class Ports:
    """One function's settings and the adapters its use cases take, each read or made on first use and then kept.

    Parameters
    ----------
    read_settings
        Reads the function's settings (:meth:`Settings.for_function`, which checks them).
    """

    def __init__(self, read_settings: Callable[[], Settings]):
        self._read_settings = read_settings
        self._regions: dict[str, Ports] = {}

    @cached_property
    def settings(self) -> Settings:
        """The function's settings, read on first use.

        Raises
        ------
        spotrun.aws.settings.MissingSettings
            When the environment lacks a declared setting (nothing is kept: the next use reads them again).
        """
        return self._read_settings()

    def checked(self) -> Ports:
        """These ports, their settings read now (see :attr:`settings`)."""
        self.settings  # noqa: B018 - read for its check; kept by cached_property
        return self

    @cached_property
    def store(self) -> JobStore:
        """The job store, publishing status changes on the deployment's bus."""
        return job_store(self.settings.jobs_table, self.settings.region, self.settings.event_bus_name)

    @cached_property
    def compute(self) -> Compute:
        """EC2."""
        return Ec2Compute(self.settings.region)

    @cached_property
    def commands(self) -> Commands:
        """SSM Run Command."""
        return SsmCommands(self.settings.region)

    @cached_property
    def events(self) -> Events | None:
        """The deployment's bus, for the control plane's own requests (a return to spot); None without one."""
        bus = self.settings.event_bus_name
        return EventBridgeEvents(bus, self.settings.region) if bus else None

    @cached_property
    def objects(self) -> Objects:
        """S3."""
        return S3Objects(self.settings.region)

    @cached_property
    def log_events(self) -> LogEvents:
        """CloudWatch Logs: the live training logs."""
        return CloudWatchLogEvents(self.settings.region)

    @cached_property
    def workflows(self) -> Workflows:
        """Step Functions."""
        return StepFunctionsWorkflows(self.settings.region)

    @cached_property
    def job_access(self) -> JobAccess:
        """STS, for the job-access role (the agent's S3 credentials)."""
        return StsJobAccess(self.settings.job_access_role_arn, self.settings.region)

    @cached_property
    def run_records(self) -> RunRecords:
        """The schedules' firings, in the jobs table."""
        return DynamoRunRecords(self.settings.jobs_table, self.settings.region)

    @cached_property
    def schedules(self) -> Schedules:
        """The deployment's EventBridge Scheduler group."""
        settings = self.settings
        return SchedulerSchedules(
            settings.schedule_group, settings.scheduled_run_arn, settings.scheduler_role_arn, settings.region
        )

    @cached_property
    def idempotency(self) -> DynamoDBPersistenceLayer:
        """Powertools' idempotency records, in the idempotency table, through this package's DynamoDB client."""
        # Imported here: only the API function uses it, and the other functions' cold starts skip its imports.
        from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

        return DynamoDBPersistenceLayer(
            table_name=self.settings.idempotency_table,
            boto3_client=client("dynamodb", self.settings.region),
        )

    def in_region(self, region: str) -> Ports:
        """The same ports in ``region`` (an EC2 event names its own); this object when it is the function's."""
        if region == self.settings.region:
            return self
        if region not in self._regions:
            there = self.settings.model_copy(update={"region": region})
            self._regions[region] = Ports(lambda: there)
        return self._regions[region]


def ports(function: str) -> Ports:
    """The ports of ``function``, made on its first invocation in this execution environment.

    Parameters
    ----------
    function
        The function's name in :data:`spotrun.shape.SHAPE`; its declared settings are the ones read, on first use
        (:attr:`Ports.settings`).

    Returns
    -------
    Ports
        The same object on every later invocation, until :func:`reset`.
    """
    with _lock:
        if function not in _ports:
            _ports[function] = Ports(partial(_declared_settings, function))
        return _ports[function]


def _declared_settings(function: str) -> Settings:
    return Settings.for_function(function, SHAPE.function(function).settings)


def reset() -> None:
    """Forget every function's ports and the boto3 clients, as a new execution environment would start.

    For tests that change the environment (settings, a new emulator or ``mock_aws``) between invocations.
    """
    with _lock:
        _ports.clear()
    forget_clients()

"""The embedded runtime: the whole deployment on one machine, on moto, with simulated spot instances.

``LocalRuntime`` starts moto's server in this process, patches it (Lambda, EventBridge, SSM, EC2), sets one
process environment for every handler, provisions :data:`spotrun.shape.SHAPE`, and runs simulated instances
whose agent subprocesses talk to the emulator over HTTP.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar

from spotrun.aws.settings import Settings
from spotrun.local.api.auth import Callers
from spotrun.local.api.gateway import ApiServer, ProxyApp
from spotrun.local.capacity.catalog import Pool, default_pools
from spotrun.local.capacity.pools import CapacityModel
from spotrun.local.capacity.trace_pools import TracePools
from spotrun.local.chaos.controls import FleetControls
from spotrun.local.chaos.interruptions import Chaos
from spotrun.local.clients import EmulatorClients
from spotrun.local.clock import Clock
from spotrun.local.executions import stop_running_executions
from spotrun.local.handler_environment import ProcessEnvironment, emulator_environment
from spotrun.local.iam import judge
from spotrun.local.iam.identities import Identities
from spotrun.local.iam.roles import INSTANCE_ROLE_NAME
from spotrun.local.instances.fleet import InstanceManager
from spotrun.local.instances.ssm_delivery import AgentDelivery
from spotrun.local.patches import (
    dispatch,
    ec2,
    ec2_placement,
    events,
    lambda_invoke,
    s3_integrity,
    s3_ranges,
    sfn,
    ssm,
)
from spotrun.local.patches.ec2_consistency import Ec2Consistency
from spotrun.local.patches.events import Dispatcher
from spotrun.local.patches.reversible import PatchSet
from spotrun.local.provision import Deployment, function_name, provision
from spotrun.local.scheduler import LocalScheduler
from spotrun.local.server import ACCOUNT_ID, EmbeddedServer
from spotrun.model.agent_protocol.api_paths import AGENT_REPORTS_PATH
from spotrun.model.simulation.traces import Trace
from spotrun.notifications import Subscription
from spotrun.shape import SHAPE, DeploymentShape

logger = logging.getLogger(__name__)


class LocalRuntime(FleetControls):
    """The deployment, emulated in this process; its simulated fleet is reached through :class:`FleetControls`.

    Parameters
    ----------
    workdir
        Where simulated instances keep their directories (``instances/<id>/nvme``, ``agent.log``).
    time_scale
        Real seconds per simulated second: shrinks boot delays and notices, and reaches the workflow through
        ``Settings.time_scale``.
    pools
        The spot pools; :func:`~spotrun.local.capacity.catalog.default_pools` when omitted.
    seed
        Seeds the default pool table and random reclaims.
    shape
        The deployment's declaration (a test may pass a smaller one).
    state_machine_file
        ASL document; ``shape.STATE_MACHINE_FILE`` when omitted.
    agent_argv
        Program started by the agent's SSM document, the command URI appended; the real agent when omitted.
    settings_overrides
        Settings to change from what provisioning derives (e.g. ``overlap_replacement=False`` for a benchmark).
    trace, trace_scale, trace_pools
        A spot trace (or its file) that drives the pools' spot capacity and interruptions once started, at
        ``trace_scale`` real seconds per trace second (``time_scale`` when omitted), on ``trace_pools`` (every
        pool when omitted); see :meth:`~spotrun.local.capacity.trace_pools.TracePools.replaying`, whose
        errors it raises.
    notifications
        The deployer's notification subscriptions (:mod:`spotrun.notifications`); e-mails land in :attr:`outbox`.
    """

    _active: ClassVar[LocalRuntime | None] = None
    _active_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        workdir: Path,
        time_scale: float = 1.0,
        pools: Sequence[Pool] | None = None,
        seed: int = 0,
        *,
        shape: DeploymentShape = SHAPE,
        state_machine_file: Path | None = None,
        agent_argv: Sequence[str] | None = None,
        region: str = "us-east-1",
        settings_overrides: Mapping[str, Any] | None = None,
        trace: Trace | Path | None = None,
        trace_scale: float | None = None,
        trace_pools: Sequence[tuple[str, str]] | None = None,
        notifications: Sequence[Subscription] = (),
    ):
        from spotrun.shape import STATE_MACHINE_FILE

        self.workdir = Path(workdir)
        self.shape = shape
        self.state_machine_file = state_machine_file or STATE_MACHINE_FILE
        self._environment = ProcessEnvironment()
        self.agents = AgentDelivery(self.instance, agent_argv, self._environment, self._api_url)
        self.agent_argv = self.agents.argv
        self.region = region
        self.settings_overrides = dict(settings_overrides or {})
        self.notifications = tuple(notifications)
        # Where SNS e-mail notifications are written, one file per mail (spotrun.local.notifications.sns_email).
        self.outbox = self.workdir / "outbox"
        self.clock = Clock(time_scale)
        self.capacity = CapacityModel(pools if pools is not None else default_pools(seed))
        self.consistency = Ec2Consistency(self.clock, seed)  # EC2 NotFound just after a launch
        self.placement_groups = ec2_placement.PlacementGroups()  # moto has none
        self.handlers = lambda_invoke.HandlerRegistry()
        for spec in shape.functions:
            self.handlers.register(function_name(spec.name), spec.handler)
        # Whom the API stand-in authenticates: every instance's own role session, registered at launch.
        self.callers = Callers(ACCOUNT_ID, now=self.clock.now)
        # Who signs the emulator's requests, judged against their policies (spotrun.local.iam).
        self.identities = Identities(self.callers, self.clock.now)
        self.manager = InstanceManager(
            self.workdir / "instances",
            self.clock,
            self.capacity,
            self.publish_event,
            ACCOUNT_ID,
            region,
            instance_role=INSTANCE_ROLE_NAME,
            on_credentials=self.callers.register_instance,
            # The real agent serves as each instance's resident agent; a stand-in agent command cannot.
            resident_environment=self.agents.resident_environment if self.agents.serves else None,
        )
        terminate = functools.partial(ec2.terminate_instance, ACCOUNT_ID, region)
        self.chaos = Chaos(self.manager, self.clock, self.publish_event, terminate, ACCOUNT_ID, seed)
        self.scheduler = LocalScheduler(self.clock, self.client, shape.schedule_group)
        self.trace_pools = (
            None
            if trace is None
            else TracePools.replaying(
                trace,
                self.capacity,
                trace_pools,
                self.interrupt,
                time_scale if trace_scale is None else trace_scale,
            )
        )
        self._server = EmbeddedServer()
        self._patches = PatchSet()
        self._dispatcher = Dispatcher()
        self._ec2_lock = threading.RLock()
        self._deployment: Deployment | None = None
        self._api: ApiServer | None = None
        self.api_url: str | None = None  # the REST API stand-in, for every runtime whose shape has the API
        self.stopped_executions: list[str] = []  # executions stop() found running
        self._started = self._used = False
        self._clients = EmulatorClients(region)

    # ------------------------------------------------------------------------------------ life cycle

    def __enter__(self) -> LocalRuntime:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> LocalRuntime:
        """Start the emulator, patch it, set the environment and provision the shape.

        Raises
        ------
        RuntimeError
            When another runtime is active in this process (moto's state is process-wide), or this one has
            already run (a runtime starts once).
        FileNotFoundError
            When the state machine file does not exist.
        """
        if self._used:
            raise RuntimeError("a LocalRuntime starts once; create a new one")
        with LocalRuntime._active_lock:
            if LocalRuntime._active is not None:
                raise RuntimeError("another LocalRuntime is running in this process")
            LocalRuntime._active = self
        self._started = self._used = True
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        if not self.state_machine_file.is_file():
            raise FileNotFoundError(f"no state machine file at {self.state_machine_file}")
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Before moto is imported (by the patches): it builds a boto3 session at import time.
        self._environment.set(emulator_environment(self.region))
        lambda_invoke.install(self._patches, self.handlers)
        sfn.install(self._patches)
        events.install(
            self._patches, self._dispatcher, self.outbox, retry_delay_seconds=self.clock.time_scale
        )
        ssm.install(
            self._patches,
            self.shape.agent_document_name,
            self.manager.can_receive,
            self.agents.deliver,
            self.manager.managed_nodes,
        )
        ec2_placement.install(self._patches, self.placement_groups)
        ec2.install(
            self._patches,
            self.capacity,
            self.manager,
            self._ec2_lock,
            self.consistency,
            self.placement_groups,
        )
        judge.install(self._patches, judge.Judge(self.identities))
        s3_integrity.install(self._patches)
        dispatch.install(self._patches)
        s3_ranges.install(self._patches)
        endpoint = self._server.start()
        self._environment.set(
            {
                "MOTO_PORT": str(self._server.port),  # the ASL interpreter's own clients call this port
                "AWS_ENDPOINT_URL": endpoint,
            }
        )
        deployment = provision(
            self.client,
            self.shape,
            self.state_machine_file,
            self.clock.time_scale,
            self.region,
            # The job-access role's ceiling is the deployment's own list, as in the CDK app.
            secret_references=self.settings_overrides.get("reference_patterns"),
            notifications=self.notifications,
        )
        # Agents report through the API's agent route: the stand-in runs for every runtime, not only `local up`.
        reports = {"agent_report_url": self._start_api() + AGENT_REPORTS_PATH} if self._has_api() else {}
        settings = deployment.settings.model_copy(update={**reports, **self.settings_overrides})
        self._deployment = dataclasses.replace(deployment, settings=settings)
        self._environment.set(self._deployment.settings.to_env())
        self.chaos.start_hazards(self.capacity)
        self.scheduler.start()
        if self.trace_pools is not None:
            self.trace_pools.start()

    def _has_api(self) -> bool:
        return any(spec.name == self.shape.api_function for spec in self.shape.functions)

    def _start_api(self) -> str:
        """Serve the REST API on 127.0.0.1, each path through its function's execution environments."""

        def served_by(logical: str) -> tuple[lambda_invoke.Handler, str]:
            name = function_name(logical)
            return self.handlers.resolve(name, self.shape.function(logical).handler), name

        handler, name = served_by(self.shape.api_function)
        subtrees = {path: served_by(logical) for path, logical in self.shape.api_routes}
        self._api = ApiServer(ProxyApp(handler, name, self.callers, subtrees))
        self.api_url = self._api.start()
        return self.api_url

    def _api_url(self) -> str:
        return self.api_url or ""

    def _stop_api(self) -> None:
        if self._api is not None:
            self._api.stop()

    def stop(self) -> None:
        """Stop executions, instances, processes and the server; undo patches; restore the environment.

        Safe to call twice and after a failed start.
        """
        if not self._started:
            return
        steps: list[tuple[str, Callable[[], None]]] = [
            ("trace", self.trace_pools.close if self.trace_pools is not None else lambda: None),
            ("chaos", self.chaos.close),
            ("clock", self.clock.close),
            ("schedules", self.scheduler.close),
            # Deliveries first: one in flight may start an execution.
            ("event deliveries", self._dispatcher.close),
            ("executions", self._stop_executions),
            ("instances", self.manager.close),
            ("api", self._stop_api),
            ("server", self._server.stop),
            ("patches", self._patches.undo_all),
            ("environment", self._environment.restore),
            ("clients", self._clients.forget),
        ]
        for name, step in steps:
            try:
                step()
            except Exception:
                logger.exception("stopping the runtime: %s failed", name)
        self._started = False
        with LocalRuntime._active_lock:
            if LocalRuntime._active is self:
                LocalRuntime._active = None

    def _stop_executions(self) -> None:
        if self._deployment is not None:
            found = stop_running_executions(self.client("stepfunctions"), ACCOUNT_ID, self.region)
            self.stopped_executions.extend(found)

    @property
    def env(self) -> dict[str, str]:
        """The variables the runtime set for every function (AWS endpoint, credentials, SPOTRUN_*)."""
        return self._environment.values

    # ------------------------------------------------------------------------------------- accessors

    @property
    def time_scale(self) -> float:
        """Real seconds per simulated second."""
        return self.clock.time_scale

    @property
    def endpoint_url(self) -> str:
        """URL of the emulator, e.g. ``http://127.0.0.1:41234``."""
        return self._server.endpoint_url

    @property
    def deployment(self) -> Deployment:
        """Names and ARNs of everything provisioned."""
        if self._deployment is None:
            raise RuntimeError("the runtime is not started")
        return self._deployment

    @property
    def settings(self) -> Settings:
        """The deployment's settings, as every function sees them."""
        return self.deployment.settings

    def client(self, service: str) -> Any:
        """A boto3 client for ``service`` on the emulator (one per service: clients are thread-safe)."""
        return self._clients.client(service, self.endpoint_url)

    def set_handler(self, function: str, handler: str | lambda_invoke.Handler) -> None:
        """Serve the function declared as ``function`` with another handler (a callable or a dotted path)."""
        self.shape.function(function)
        self.handlers.register(function_name(function), handler)

    # ------------------------------------------------------------------------------ schedules and events

    def fire_schedule(self, name: str) -> dict[str, Any]:
        """Fire a schedule now, as EventBridge Scheduler would; see :class:`spotrun.local.scheduler.LocalScheduler`."""
        return self.scheduler.fire(name)

    def publish_event(
        self, source: str, detail_type: str, detail: dict[str, Any], resources: list[str]
    ) -> None:
        """Put an event on the emulator's default bus (rules deliver it asynchronously)."""
        events.publish(ACCOUNT_ID, self.region, source, detail_type, detail, resources)

"""The control API of ``spotrun local up``: chaos on demand, as JSON over HTTP on 127.0.0.1.

========  ===============  ==================================================================================
Method    Path             Body -> answer
========  ===============  ==================================================================================
GET       ``/status``      -> ``{endpoint_url, time_scale, workdir}``
GET       ``/instances``   -> ``{instances: [{instance_id, instance_type, availability_zone, lifecycle, state,
                           reachable, hung, rebalance, instance_action, private_ip, placement_group,
                           gpus: [{index, uuid, utilization, memory_percent}]}]}`` (gpus: the values driven)
GET       ``/pools``       -> ``{pools: [{instance_type, availability_zone, spot_price, capacity, in_use}]}``
POST      ``/interrupt``   ``{instance_id, notice_seconds?=120, rebalance_lead_seconds?=0}``: as AWS FIS's
                           ``aws:ec2:send-spot-instance-interruptions``
POST      ``/kill``        ``{instance_id, hang?=false}``: death without notice
POST      ``/hang-training`` ``{instance_id, resume?=false}`` -> ``{instance_id, resume, pids}``: the instance's
                           training processes stop (SIGSTOP) while its agent runs on; ``resume`` continues them
POST      ``/exhaust``     ``{instance_type, availability_zone, lifecycle?="spot"}``: capacity to 0
POST      ``/refill``      ``{instance_type, availability_zone}``: the declared capacity back
POST      ``/fleet-error`` ``{code, count?=1, message?}``: the next ``count`` CreateFleet calls fail with
                           ``code`` (quota, configuration or capacity; see ``spotrun.model.capacity.fleet_errors``)
POST      ``/ec2-notfound`` ``{describe?=0, terminate?=0, window_seconds?}``: the next launches answer
                           ``InvalidInstanceID.NotFound`` to DescribeInstances / TerminateInstances for a while
POST      ``/gpu``         ``{instance_id, utilization?, memory_percent?, gpu?, reset?=false}`` -> ``{instance_id,
                           gpus: [{index, uuid, utilization, memory_percent}]}``: the instance's GPUs (or GPU
                           ``gpu``) read these percentages in its nvidia-smi until ``reset``; unset (null) values
                           follow its training (busy while it runs, idle when stopped or absent)
========  ===============  ==================================================================================

Errors answer ``{"error": message}`` with 400 (bad request), 404 (unknown instance, pool or path) or 409
(the instance cannot take it: on-demand, already terminated).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spotrun.local.instances.instance import SimulatedInstance
from spotrun.local.loopback import LoopbackServer
from spotrun.local.runtime import LocalRuntime
from spotrun.model.capacity.candidates import Lifecycle
from spotrun.model.capacity.fleet_errors import classify

logger = logging.getLogger(__name__)

Reply = tuple[int, dict[str, Any]]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InterruptRequest(_Body):
    """Body of ``POST /interrupt``; durations in simulated seconds."""

    instance_id: str
    notice_seconds: float = Field(120.0, ge=0)
    rebalance_lead_seconds: float = Field(0.0, ge=0)


class KillRequest(_Body):
    """Body of ``POST /kill``."""

    instance_id: str
    hang: bool = False


class HangTrainingRequest(_Body):
    """Body of ``POST /hang-training``."""

    instance_id: str
    resume: bool = False


class GpuRequest(_Body):
    """Body of ``POST /gpu``: percentages, 0-100."""

    instance_id: str
    utilization: float | None = Field(None, ge=0, le=100)
    memory_percent: float | None = Field(None, ge=0, le=100)
    gpu: int | None = Field(None, ge=0)
    reset: bool = False


class PoolRequest(_Body):
    """Body of ``POST /exhaust`` and ``POST /refill``."""

    instance_type: str
    availability_zone: str
    lifecycle: Lifecycle = "spot"


class FleetErrorRequest(_Body):
    """Body of ``POST /fleet-error``."""

    code: str = Field(min_length=1, pattern=r"^[A-Za-z][A-Za-z0-9.]*$")
    count: int = Field(1, ge=1)
    message: str | None = None


class NotFoundRequest(_Body):
    """Body of ``POST /ec2-notfound``; the window in simulated seconds."""

    describe: int = Field(0, ge=0)
    terminate: int = Field(0, ge=0)
    window_seconds: float | None = Field(None, ge=0)


class Refused(Exception):
    """A request the API answers with an error status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def describe_instance(sim: SimulatedInstance) -> dict[str, Any]:
    """One instance as the API shows it (``state`` is EC2's: a hung instance still says running)."""
    return {
        "instance_id": sim.instance_id,
        "instance_type": sim.instance_type,
        "availability_zone": sim.availability_zone,
        "lifecycle": sim.lifecycle,
        "state": sim.state,
        "reachable": sim.reachable,
        "hung": sim.hung,
        "rebalance": sim.metadata.rebalance,
        "instance_action": sim.metadata.instance_action,
        "private_ip": sim.private_ip,
        "placement_group": sim.model.placement.group_name or None,
        "gpus": sim.gpus.driven(),
    }


class ControlApi:
    """Routes control requests to a running :class:`LocalRuntime`.

    Parameters
    ----------
    runtime
        The started runtime.
    on_action
        Told a one-line description of each chaos action done (for the ``local up`` console).
    """

    def __init__(self, runtime: LocalRuntime, on_action: Callable[[str], None] | None = None):
        self.runtime = runtime
        self._on_action = on_action
        self._routes: dict[tuple[str, str], Callable[[bytes], dict[str, Any]]] = {
            ("GET", "/status"): self._status,
            ("GET", "/instances"): self._instances,
            ("GET", "/pools"): self._pools,
            ("POST", "/interrupt"): self._interrupt,
            ("POST", "/kill"): self._kill,
            ("POST", "/hang-training"): self._hang_training,
            ("POST", "/exhaust"): self._exhaust,
            ("POST", "/refill"): self._refill,
            ("POST", "/fleet-error"): self._fleet_error,
            ("POST", "/ec2-notfound"): self._ec2_not_found,
            ("POST", "/gpu"): self._gpu,
        }

    def handle(self, method: str, path: str, body: bytes) -> Reply:
        """Answer one request: ``(HTTP status, JSON-able body)``."""
        route = self._routes.get((method, path.split("?", 1)[0].rstrip("/") or "/"))
        if route is None:
            return 404, {"error": f"no such endpoint: {method} {path}"}
        try:
            return 200, route(body)
        except Refused as exc:
            return exc.status, {"error": exc.message}
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
            )
            return 400, {"error": problems}
        except Exception as exc:
            logger.exception("control API: %s %s failed", method, path)
            return 500, {"error": f"{type(exc).__name__}: {exc}"}

    def _told(self, line: str) -> None:
        if self._on_action is not None:
            self._on_action(line)

    def _live_instance(self, instance_id: str) -> SimulatedInstance:
        try:
            sim = self.runtime.instance(instance_id)
        except KeyError:
            raise Refused(404, f"no instance {instance_id} in this runtime") from None
        if sim.ended.is_set():
            raise Refused(409, f"{instance_id} is already {'hung' if sim.hung else sim.state}")
        return sim

    def _status(self, _: bytes) -> dict[str, Any]:
        runtime = self.runtime
        return {
            "endpoint_url": runtime.endpoint_url,
            "time_scale": runtime.time_scale,
            "workdir": str(runtime.workdir),
        }

    def _instances(self, _: bytes) -> dict[str, Any]:
        return {"instances": [describe_instance(sim) for sim in self.runtime.instances]}

    def _pools(self, _: bytes) -> dict[str, Any]:
        capacity = self.runtime.capacity
        pools = [
            {
                "instance_type": pool.instance_type,
                "availability_zone": pool.availability_zone,
                "spot_price": pool.spot_price,
                "capacity": pool.capacity,
                "in_use": capacity.used(pool.instance_type, pool.availability_zone),
            }
            for pool in capacity.pools()
        ]
        return {"pools": pools}

    def _interrupt(self, body: bytes) -> dict[str, Any]:
        request = InterruptRequest.model_validate_json(body or b"{}")
        sim = self._live_instance(request.instance_id)
        if sim.lifecycle != "spot":
            raise Refused(409, f"{sim.instance_id} is {sim.lifecycle}: only spot instances get interrupted")
        self.runtime.interrupt(sim.instance_id, request.notice_seconds, request.rebalance_lead_seconds)
        simulated = request.rebalance_lead_seconds + request.notice_seconds
        real = self.runtime.clock.scaled(simulated)
        self._told(
            f"interrupt {sim.instance_id}: rebalance recommendation, warning "
            f"after {request.rebalance_lead_seconds:g} s, terminated after {simulated:g} s ({real:.1f} s real)"
        )
        return {
            **request.model_dump(),
            "terminates_in_seconds": simulated,
            "terminates_in_real_seconds": real,
        }

    def _kill(self, body: bytes) -> dict[str, Any]:
        request = KillRequest.model_validate_json(body or b"{}")
        sim = self._live_instance(request.instance_id)
        self.runtime.kill(sim.instance_id, hang=request.hang)
        self._told(f"kill {sim.instance_id}{' (hung: EC2 still says running)' if request.hang else ''}")
        return request.model_dump()

    def _hang_training(self, body: bytes) -> dict[str, Any]:
        request = HangTrainingRequest.model_validate_json(body or b"{}")
        sim = self._live_instance(request.instance_id)
        if request.resume:
            pids = self.runtime.resume_training(sim.instance_id)
            self._told(f"resume training on {sim.instance_id}: {len(pids)} process(es) continued")
        else:
            try:
                pids = self.runtime.hang_training(sim.instance_id)
            except RuntimeError as exc:
                raise Refused(409, str(exc)) from None
            self._told(
                f"hang training on {sim.instance_id}: {len(pids)} process(es) stopped, its agent runs on"
            )
        return {**request.model_dump(), "pids": pids}

    def _gpu(self, body: bytes) -> dict[str, Any]:
        request = GpuRequest.model_validate_json(body or b"{}")
        sim = self._live_instance(request.instance_id)
        driven = request.utilization is not None or request.memory_percent is not None
        if request.reset:
            if driven or request.gpu is not None:
                raise Refused(400, "reset drives nothing: give reset alone, or values without it")
            gpus = self.runtime.reset_gpu(sim.instance_id)
            self._told(f"gpu {sim.instance_id}: readings follow its training again")
        else:
            try:
                gpus = self.runtime.set_gpu(
                    sim.instance_id, request.utilization, request.memory_percent, request.gpu
                )
            except ValueError as exc:
                raise Refused(409 if sim.gpus.count == 0 else 400, str(exc)) from None
            which = "every GPU" if request.gpu is None else f"GPU {request.gpu}"
            values = ", ".join(
                f"{name} {value:g} %"
                for name, value in (("utilization", request.utilization), ("memory", request.memory_percent))
                if value is not None
            )
            self._told(f"gpu {sim.instance_id}: {which} reads {values}")
        return {"instance_id": sim.instance_id, "gpus": gpus}

    def _pool_request(self, body: bytes) -> PoolRequest:
        request = PoolRequest.model_validate_json(body or b"{}")
        if self.runtime.capacity.pool(request.instance_type, request.availability_zone) is None:
            raise Refused(404, f"no pool {request.instance_type} in {request.availability_zone}")
        return request

    def _exhaust(self, body: bytes) -> dict[str, Any]:
        request = self._pool_request(body)
        self.runtime.capacity.exhaust(request.instance_type, request.availability_zone, request.lifecycle)
        self._told(f"exhaust {request.lifecycle} {request.instance_type} in {request.availability_zone}")
        return {**request.model_dump(), "capacity": 0}

    def _refill(self, body: bytes) -> dict[str, Any]:
        request = self._pool_request(body)
        self.runtime.capacity.refill(request.instance_type, request.availability_zone)
        pool = self.runtime.capacity.pool(request.instance_type, request.availability_zone)
        self._told(f"refill {request.instance_type} in {request.availability_zone}")
        return {**request.model_dump(exclude={"lifecycle"}), "capacity": pool.capacity if pool else None}

    def _fleet_error(self, body: bytes) -> dict[str, Any]:
        request = FleetErrorRequest.model_validate_json(body or b"{}")
        self.runtime.capacity.fleet_errors.inject(request.code, request.count, request.message)
        kind = classify(request.code)
        self._told(f"fleet-error {request.code} ({kind}) for the next {request.count} CreateFleet call(s)")
        return {**request.model_dump(exclude_none=True), "kind": kind}

    def _ec2_not_found(self, body: bytes) -> dict[str, Any]:
        request = NotFoundRequest.model_validate_json(body or b"{}")
        if not (request.describe or request.terminate):
            raise Refused(400, "give describe and/or terminate: how many launches to hide")
        self.runtime.consistency.inject(
            describe=request.describe, terminate=request.terminate, window_seconds=request.window_seconds
        )
        self._told(
            f"ec2-notfound: next {request.describe} launch(es) hidden from DescribeInstances, "
            f"{request.terminate} from TerminateInstances"
        )
        return request.model_dump(exclude_none=True)


class _Handler(BaseHTTPRequestHandler):
    server: _ControlHttpServer
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        status, answer = self.server.api.handle(self.command, self.path, body)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _serve  # noqa: N815 - http.server's naming

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("control API: " + format, *args)


class _ControlHttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], api: ControlApi):
        super().__init__(address, _Handler)
        self.api = api


class ControlServer(LoopbackServer):
    """Serves a :class:`ControlApi` on 127.0.0.1 and a free port, from a daemon thread.

    Parameters
    ----------
    api
        What to serve.
    """

    def __init__(self, api: ControlApi):
        super().__init__(lambda address: _ControlHttpServer(address, api), "control-api")

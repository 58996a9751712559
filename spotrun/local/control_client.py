"""How the ``spotrun local`` commands find a running ``spotrun local up``, and talk to its control API.

``local up`` writes a state file (``<workdir>/local.json``) naming its emulator endpoint and the URL of its
control API; the chaos commands read it and call the API. Nothing here imports moto: the client side stays
light.
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from spotrun.aws.settings import Settings

STATE_FILE_NAME = "local.json"


class NoLocalRuntime(RuntimeError):
    """No ``spotrun local up`` answers for this working directory."""


class ControlError(RuntimeError):
    """The control API refused a request (unknown instance, on-demand instance, bad pool...).

    Parameters
    ----------
    status
        HTTP status of the answer.
    message
        What the API said.
    """

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class LocalState(BaseModel):
    """What a running ``spotrun local up`` tells the other commands (the content of the state file)."""

    model_config = ConfigDict(frozen=True)

    pid: int
    endpoint_url: str  # the AWS emulator
    control_url: str  # the chaos control API
    api_url: str | None = (
        None  # the REST API (API Gateway's proxy, emulated), when the shape has an "api" function
    )
    time_scale: float
    workdir: str
    started_at: datetime
    settings: Settings  # names of the deployment's buckets, tables, state machine...


def state_path(workdir: Path) -> Path:
    """Where ``local up`` started in ``workdir`` keeps its state file."""
    return Path(workdir) / STATE_FILE_NAME


def write_state(workdir: Path, state: LocalState) -> Path:
    """Write the state file atomically, readable by its owner only; return its path."""
    path = state_path(workdir)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.write_text(state.model_dump_json(indent=2) + "\n", encoding="utf-8")
    scratch.chmod(0o600)
    scratch.replace(path)
    return path


def remove_state(workdir: Path, pid: int) -> None:
    """Remove the state file if it is the one process ``pid`` wrote (a newer ``local up`` keeps its own)."""
    path = state_path(workdir)
    with contextlib.suppress(FileNotFoundError, ValueError, ValidationError):
        if LocalState.model_validate_json(path.read_text(encoding="utf-8")).pid == pid:
            path.unlink()


def read_state(workdir: Path) -> LocalState:
    """Read the state file of the ``local up`` started in ``workdir``.

    Raises
    ------
    NoLocalRuntime
        When there is no state file, or it cannot be read.
    """
    path = state_path(workdir)
    try:
        return LocalState.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NoLocalRuntime(
            f"no local runtime is running for {workdir} (no {path}); start one with `spotrun local up`"
        ) from None
    except (OSError, ValidationError) as exc:
        raise NoLocalRuntime(f"unreadable state file {path}: {exc}") from exc


class ControlClient:
    """Calls the control API of a running ``spotrun local up``.

    Parameters
    ----------
    state
        The state that ``local up`` wrote.
    timeout
        Seconds to wait for each answer.
    """

    def __init__(self, state: LocalState, timeout: float = 10.0):
        self.state = state
        self.timeout = timeout

    @classmethod
    def for_workdir(cls, workdir: Path) -> ControlClient:
        """A client for the ``local up`` started in ``workdir`` (raises :class:`NoLocalRuntime`)."""
        return cls(read_state(workdir))

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Send one request; return the decoded JSON answer.

        Raises
        ------
        NoLocalRuntime
            When nothing answers (the runtime stopped without removing its state file).
        ControlError
            When the API answers with an error status.
        """
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - the URL is http://127.0.0.1:<port> from the state file
            self.state.control_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", exc.reason)
            except (ValueError, AttributeError):
                message = str(exc.reason)
            raise ControlError(exc.code, str(message)) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise NoLocalRuntime(
                f"the local runtime of {self.state.workdir} (pid {self.state.pid}) does not answer at "
                f"{self.state.control_url}: {getattr(exc, 'reason', exc)}; start one with `spotrun local up`"
            ) from None

    def status(self) -> dict[str, Any]:
        """The runtime's endpoint, time scale and working directory."""
        return dict(self.request("GET", "/status"))

    def instances(self) -> list[dict[str, Any]]:
        """Every instance the runtime launched (terminated ones too), oldest first."""
        return list(self.request("GET", "/instances")["instances"])

    def pools(self) -> list[dict[str, Any]]:
        """Every spot pool with its price, capacity and instances in use."""
        return list(self.request("GET", "/pools")["pools"])

    def interrupt(
        self,
        instance_id: str,
        notice_seconds: float | None = None,
        rebalance_lead_seconds: float | None = None,
    ) -> dict[str, Any]:
        """Reclaim a spot instance with a notice (simulated seconds; 120 by default)."""
        body: dict[str, Any] = {"instance_id": instance_id}
        if notice_seconds is not None:
            body["notice_seconds"] = notice_seconds
        if rebalance_lead_seconds is not None:
            body["rebalance_lead_seconds"] = rebalance_lead_seconds
        return dict(self.request("POST", "/interrupt", body))

    def kill(self, instance_id: str, hang: bool = False) -> dict[str, Any]:
        """Kill an instance without notice (``hang``: it keeps looking alive to EC2)."""
        return dict(self.request("POST", "/kill", {"instance_id": instance_id, "hang": hang}))

    def hang_training(self, instance_id: str, resume: bool = False) -> dict[str, Any]:
        """Stop an instance's training processes while its agent runs on (``resume``: continue them)."""
        return dict(self.request("POST", "/hang-training", {"instance_id": instance_id, "resume": resume}))

    def exhaust(self, instance_type: str, availability_zone: str, lifecycle: str = "spot") -> dict[str, Any]:
        """Leave a pool without capacity: launches there fail with InsufficientInstanceCapacity."""
        body = {
            "instance_type": instance_type,
            "availability_zone": availability_zone,
            "lifecycle": lifecycle,
        }
        return dict(self.request("POST", "/exhaust", body))

    def refill(self, instance_type: str, availability_zone: str) -> dict[str, Any]:
        """Give a pool back its declared capacity."""
        body = {"instance_type": instance_type, "availability_zone": availability_zone}
        return dict(self.request("POST", "/refill", body))

    def fleet_error(self, code: str, count: int = 1) -> dict[str, Any]:
        """Make the next ``count`` CreateFleet calls fail with the EC2 error ``code``."""
        return dict(self.request("POST", "/fleet-error", {"code": code, "count": count}))

    def ec2_not_found(self, describe: int = 0, terminate: int = 0) -> dict[str, Any]:
        """Hide the next launches from DescribeInstances / TerminateInstances (eventual consistency)."""
        return dict(self.request("POST", "/ec2-notfound", {"describe": describe, "terminate": terminate}))

    def gpu(
        self,
        instance_id: str,
        utilization: float | None = None,
        memory_percent: float | None = None,
        gpu: int | None = None,
        reset: bool = False,
    ) -> dict[str, Any]:
        """Drive what an instance's GPUs (or GPU ``gpu``) read in its nvidia-smi (percentages); ``reset``: let
        them follow its training again."""
        body: dict[str, Any] = {"instance_id": instance_id, "reset": reset}
        for name, value in (("utilization", utilization), ("memory_percent", memory_percent), ("gpu", gpu)):
            if value is not None:
                body[name] = value
        return dict(self.request("POST", "/gpu", body))

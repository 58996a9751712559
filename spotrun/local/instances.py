"""Simulated EC2 instances: a directory standing in for the disk, a metadata service, and real processes.

moto keeps an instance's record (id, type, subnet, state); :class:`InstanceManager` adds what an instance
*does*: it boots for the pool's delay (moto reports ``pending`` meanwhile), holds a pool slot, answers IMDS,
runs the agent processes SSM starts, and on termination kills them and frees the slot. State changes are
published as ``EC2 Instance State-change Notification`` events, as EC2 does.

At boot, before the SSM agent registers, each instance starts its own resident agent (``python -m spotrun.agent
serve``, what the user data's systemd unit starts on EC2) with its inbox under the instance's directory; SSM
delivery plays the agent document's own script, with the instance's directory standing in for ``/run/spotrun``
and ``/var/log``, so a step is handed to the resident agent when it is alive and started as a fresh process
otherwise (:func:`spotrun.shape.agent_script`).

Its SSM agent registers some time after EC2 reports ``running`` (the agent starts late in the boot, then
registers with the SSM endpoint): until then SSM does not list the instance as a managed node and
SendCommand answers ``InvalidInstanceId``, whose documented causes include "SSM Agent isn't registered with
the SSM endpoint" (https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_SendCommand.html).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from spotrun.local.capacity import CapacityModel
from spotrun.local.clock import Clock
from spotrun.local.imds import ImdsServer, InstanceMetadata, RoleCredentials
from spotrun.model.capacity import Lifecycle
from spotrun.model.ec2 import STATE_CHANGE
from spotrun.shape import AGENT_LOG_LINE, AGENT_PROGRAM, AGENT_RUN_DIR_LINE, SHAPE

logger = logging.getLogger(__name__)

# Every process started on a simulated instance carries this variable, inherited by whatever it spawns, so
# termination finds them all even when the agent put its children in sessions of their own.
INSTANCE_MARKER = "SPOTRUN_LOCAL_INSTANCE_ID"
KILL_GRACE_SECONDS = 1.0
DEFAULT_BOOT_DELAY_SECONDS = 60.0
# Simulated seconds from EC2 "running" to the SSM agent being registered and Online. Longer than the
# workflow's readiness poll at any time scale, so a control plane that skipped the wait would be caught.
DEFAULT_SSM_REGISTRATION_DELAY_SECONDS = 60.0

# (source, detail-type, detail, resources) -> None
Publisher = Callable[[str, str, dict[str, Any], list[str]], None]
# The environment the instance's resident agent starts with (what the user data gives its systemd unit).
ResidentEnvironment = Callable[["SimulatedInstance"], Mapping[str, str]]


def resident_agent_argv(run_dir: Path) -> list[str]:
    """The resident agent of a simulated instance: the dev venv's ``spotrun-agent serve`` on its directory."""
    return [sys.executable, "-m", "spotrun.agent", "serve", "--run-dir", str(run_dir)]


def instance_agent_script(run_dir: Path, log_path: Path) -> str:
    """The agent document's script as a simulated instance runs it: its paths mapped onto the instance's.

    ``/run/spotrun`` becomes ``run_dir``, the log ``log_path``, and the fallback's ``spotrun-agent run
    --command-uri`` the script's own arguments (``"$@"``: the runtime's agent command), never text of it; the
    rest is the document's text. A trailing ``wait`` keeps the shell the parent of a detached agent until it
    ends, as init reaps it on EC2 (nothing else here would).

    Raises
    ------
    ValueError
        When the document no longer holds exactly one of each line mapped (the emulator would drift from it).
    """
    (step,) = SHAPE.agent_document()["mainSteps"]
    script = "\n".join(step["inputs"]["runCommand"])
    mapped = {
        AGENT_RUN_DIR_LINE: f"spotrun_run={shlex.quote(str(run_dir))}",
        AGENT_LOG_LINE: f"spotrun_log={shlex.quote(str(log_path))}",
        AGENT_PROGRAM: '"$@"',
    }
    for original, replacement in mapped.items():
        if script.count(original) != 1:
            raise ValueError(f"the agent document's script no longer holds {original!r} exactly once")
        script = script.replace(original, replacement)
    return f"{script}\nwait\n"


class SimulatedInstance:
    """One instance: its moto record, its directory, its metadata service and its processes."""

    def __init__(
        self,
        model: Any,
        lifecycle: Lifecycle,
        root: Path,
        region: str,
        credentials: RoleCredentials | None = None,
    ):
        self.model = model  # moto.ec2.models.instances.Instance
        self.instance_id: str = model.id
        self.instance_type: str = model.instance_type
        self.availability_zone: str = model.placement.zone
        self.lifecycle: Lifecycle = lifecycle
        self.directory = root / self.instance_id
        self.nvme_dir = self.directory / "nvme"
        self.log_path = self.directory / "agent.log"
        self.run_dir = self.directory / "run"  # /run/spotrun: the resident agent's inbox and pid file
        self.nvme_dir.mkdir(parents=True, exist_ok=True)
        self.metadata = InstanceMetadata(
            instance_id=self.instance_id,
            instance_type=self.instance_type,
            availability_zone=self.availability_zone,
            lifecycle=lifecycle,
            region=region,
            ami_id=getattr(model, "image_id", "") or "",
            credentials=credentials,
        )
        self.imds = ImdsServer(self.metadata)
        self.booted = threading.Event()
        self.registered = threading.Event()  # the SSM agent has registered (a managed node)
        self.ended = threading.Event()  # termination began (or the instance hung)
        self.gone = threading.Event()  # processes dead and metadata service stopped
        self.terminating = False
        self.hung = False  # chaos: dead to the world while EC2 still says running
        self.shutdown_grace = KILL_GRACE_SECONDS  # 0 for a death without shutdown
        self._processes: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()

    @property
    def state(self) -> str:
        """EC2 state name as moto reports it (pending, running, terminated...)."""
        return str(self.model.state)

    @property
    def reachable(self) -> bool:
        """Whether the instance has booted, runs, and can take a command."""
        return self.booted.is_set() and not self.ended.is_set() and not self.hung and self.state == "running"

    @property
    def managed(self) -> bool:
        """Whether SSM can deliver a command: reachable and its SSM agent registered."""
        return self.reachable and self.registered.is_set()

    @property
    def ping_status(self) -> str | None:
        """SSM's PingStatus: Online, ConnectionLost (hung), or None (not registered, or terminated).

        DescribeInstanceInformation returns nothing for stopped or terminated nodes.
        """
        if not self.registered.is_set() or self.state in ("shutting-down", "terminated") or self.terminating:
            return None
        return "ConnectionLost" if self.hung else "Online"

    @property
    def pids(self) -> list[int]:
        """Ids of the processes started on the instance that are still alive."""
        with self._lock:
            return [proc.pid for proc in self._processes if proc.poll() is None]

    def wait_running(self, timeout: float | None = None) -> bool:
        """Block until the instance has booted; False on timeout or when it ended first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.booted.is_set() and not self.ended.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self.booted.wait(0.05 if left is None else min(0.05, left))
        return self.booted.is_set() and not self.ended.is_set()

    def wait_managed(self, timeout: float | None = None) -> bool:
        """Block until SSM can reach the instance (booted and its agent registered); False on timeout or end."""
        if not self.wait_running(timeout):
            return False
        self.registered.wait(timeout)
        return self.managed

    def start_process(self, argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        """Start ``argv`` on the instance: own session, output appended to the instance's log.

        Raises
        ------
        RuntimeError
            When the instance is not running.
        """
        with self._lock:
            if not self.reachable:
                raise RuntimeError(f"instance {self.instance_id} is not running")
            with self.log_path.open("ab") as log:
                proc = subprocess.Popen(
                    list(argv),
                    env={**env, INSTANCE_MARKER: self.instance_id},
                    cwd=self.directory,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self._processes.append(proc)
        return proc

    def run_agent_script(
        self, agent_argv: Sequence[str], variable: str, env: Mapping[str, str]
    ) -> subprocess.Popen[bytes]:
        """Run the agent document's script as the SSM Agent does with an ``ENV_VAR`` parameter: its text fixed,
        the value only in the environment variable ``variable``, which the script expands only quoted.

        The script is the document's own (:func:`instance_agent_script`): it hands the URI to the instance's
        resident agent when that is alive, and otherwise starts ``agent_argv`` (standing in for ``spotrun-agent
        run --command-uri``) with the URI appended; a value holding shell syntax reaches either as one argument,
        unexpanded.

        Raises
        ------
        RuntimeError
            When the instance is not running.
        ValueError
            When the document's script does not read its value from ``variable``.
        """
        script = instance_agent_script(self.run_dir, self.log_path)
        if f'"${variable}"' not in script:
            raise ValueError(f"the agent document's script does not read {variable}")
        return self.start_process(["/bin/sh", "-c", script, "sh", *agent_argv], env)

    def start_resident_agent(self, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        """Start the instance's resident agent, as its user data's systemd unit does at boot.

        Raises
        ------
        RuntimeError
            When the instance is not running.
        """
        return self.start_process(resident_agent_argv(self.run_dir), env)

    def kill_processes(self, grace_seconds: float) -> None:
        """End every process of the instance: SIGTERM, then SIGKILL after ``grace_seconds`` (0: at once)."""
        with self._lock:
            procs = list(self._processes)
        if grace_seconds > 0:
            self._signal_all(procs, signal.SIGTERM)
            deadline = time.monotonic() + grace_seconds
            while time.monotonic() < deadline and (any(p.poll() is None for p in procs) or _marked(self)):
                time.sleep(0.05)
        self._signal_all(procs, signal.SIGKILL)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def _signal_all(self, procs: list[subprocess.Popen[bytes]], sig: signal.Signals) -> None:
        targets = {proc.pid for proc in procs if proc.poll() is None}
        groups = set(targets)
        for pid in _marked(self):
            targets.add(pid)
            with contextlib.suppress(OSError):
                groups.add(os.getpgid(pid))
        for group in groups:
            with contextlib.suppress(OSError):
                os.killpg(group, sig)
        for pid in targets:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)


def _marked(instance: SimulatedInstance) -> list[int]:
    """Pids of live processes carrying the instance's marker variable (Linux /proc; empty elsewhere)."""
    proc_root = Path("/proc")
    if not proc_root.is_dir():
        return []
    needle = f"{INSTANCE_MARKER}={instance.instance_id}".encode()
    found = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # A zombie (state Z) has already died; it only waits for its parent to reap it.
        if needle in environ.split(b"\0") and stat.rsplit(")", 1)[-1].split()[0] != "Z":
            found.append(int(entry.name))
    return found


class InstanceManager:
    """The simulated instances of one runtime and their life cycle.

    Parameters
    ----------
    root
        Directory under which each instance gets ``<instance-id>/``.
    clock
        Scales boot delays.
    capacity
        Pool slots are taken at launch and freed at termination.
    publish
        Puts an event on the default bus.
    account_id, region
        Used in event resources.
    ssm_registration_delay_seconds
        Simulated seconds between EC2 ``running`` and the SSM agent registering.
    instance_role
        The role of the instance profile every launch passes (the launch template's); empty: none.
    on_credentials
        Told ``(instance_id, credentials)`` of each instance's own role session, which its IMDS serves, so
        that the API stand-in can authenticate what the instance signs with them.
    resident_environment
        The environment of each instance's resident agent, started at boot; None: no resident agent (every
        step then starts a process of its own: for a stand-in agent command, which cannot serve).
    """

    def __init__(
        self,
        root: Path,
        clock: Clock,
        capacity: CapacityModel,
        publish: Publisher,
        account_id: str,
        region: str,
        ssm_registration_delay_seconds: float = DEFAULT_SSM_REGISTRATION_DELAY_SECONDS,
        instance_role: str = "",
        on_credentials: Callable[[str, RoleCredentials], None] | None = None,
        resident_environment: ResidentEnvironment | None = None,
    ):
        self.root = root
        self.resident_environment = resident_environment
        self.instance_role = instance_role
        self.on_credentials = on_credentials
        self.ssm_registration_delay_seconds = ssm_registration_delay_seconds
        self.clock = clock
        self.capacity = capacity
        self.publish = publish
        self.account_id = account_id
        self.region = region
        self._instances: dict[str, SimulatedInstance] = {}
        self._lock = threading.RLock()
        self._reapers: list[threading.Thread] = []

    def get(self, instance_id: str) -> SimulatedInstance | None:
        """The simulated instance ``instance_id``, if the runtime launched it."""
        with self._lock:
            return self._instances.get(instance_id)

    def all(self) -> list[SimulatedInstance]:
        """Every instance launched so far, terminated ones included."""
        with self._lock:
            return list(self._instances.values())

    def launched(self, model: Any, lifecycle: Lifecycle) -> SimulatedInstance:
        """Take over an instance moto just created: hold its slot, report pending, boot it after the delay."""
        # Each instance its own session of the role: EC2 names it after the instance.
        credentials = RoleCredentials.issue(self.instance_role) if self.instance_role else None
        sim = SimulatedInstance(model, lifecycle, self.root, self.region, credentials)
        if credentials is not None and self.on_credentials is not None:
            self.on_credentials(sim.instance_id, credentials)
        with self._lock:
            self._instances[sim.instance_id] = sim
        self.capacity.allocate(sim.instance_id, sim.instance_type, sim.availability_zone, lifecycle)
        model._state.name, model._state.code = "pending", 0
        sim.imds.start()
        self._state_change(sim, "pending")
        pool = self.capacity.pool(sim.instance_type, sim.availability_zone)
        delay = pool.boot_delay_seconds if pool else DEFAULT_BOOT_DELAY_SECONDS
        if self.clock.call_later(delay, self._boot, sim) is None:
            logger.warning("instance %s launched after the runtime stopped; it never boots", sim.instance_id)
        return sim

    def _boot(self, sim: SimulatedInstance) -> None:
        with self._lock:
            if sim.model.state != "pending" or sim.ended.is_set():
                return
            sim.model._state.name, sim.model._state.code = "running", 16
            sim.booted.set()
        self._state_change(sim, "running")
        if self.resident_environment is not None:
            # The user data's unit starts it as early in boot as it can: before the SSM agent registers.
            try:
                sim.start_resident_agent(self.resident_environment(sim))
            except RuntimeError as exc:  # it ended meanwhile
                logger.info("no resident agent on %s: %s", sim.instance_id, exc)
        self.clock.call_later(self.ssm_registration_delay_seconds, sim.registered.set)

    def managed_nodes(self) -> dict[str, str]:
        """Instance id -> SSM PingStatus of every registered, not terminated instance."""
        return {sim.instance_id: status for sim in self.all() if (status := sim.ping_status) is not None}

    def terminated(self, model: Any) -> None:
        """React to moto terminating an instance: free its slot, stop its processes and metadata service."""
        sim = self.get(model.id)
        if sim is None:
            return
        with self._lock:
            if sim.terminating:
                return
            sim.terminating = True
            sim.ended.set()
        self.capacity.release(sim.instance_id)
        self._state_change(sim, "shutting-down")
        # Killing waits for the grace period; the TerminateInstances caller must not.
        reaper = threading.Thread(
            target=self._reap, args=(sim, sim.shutdown_grace), name=f"reap-{sim.instance_id}", daemon=True
        )
        with self._lock:
            self._reapers = [t for t in self._reapers if t.is_alive()] + [reaper]
        reaper.start()

    def _reap(self, sim: SimulatedInstance, grace_seconds: float) -> None:
        try:
            sim.kill_processes(grace_seconds)
        finally:
            sim.imds.stop()
            sim.gone.set()
            self._state_change(sim, "terminated")

    def hang(self, sim: SimulatedInstance) -> None:
        """Chaos: the instance dies silently; EC2 still reports it running and it keeps its slot."""
        with self._lock:
            sim.hung = True
            sim.ended.set()
        sim.kill_processes(0)
        sim.imds.stop()

    def close(self) -> None:
        """Stop everything at once: processes killed without grace, metadata services stopped."""
        for sim in self.all():
            sim.terminating = True
            sim.ended.set()
            self.capacity.release(sim.instance_id)
            sim.kill_processes(0)
            sim.imds.stop()
            sim.gone.set()
        with self._lock:
            reapers, self._reapers = self._reapers, []
        for reaper in reapers:
            reaper.join(timeout=10)

    def _state_change(self, sim: SimulatedInstance, state: str) -> None:
        arn = f"arn:aws:ec2:{self.region}:{self.account_id}:instance/{sim.instance_id}"
        detail = {"instance-id": sim.instance_id, "state": state}
        try:
            self.publish("aws.ec2", STATE_CHANGE, detail, [arn])
        except Exception:
            # Events are best effort, as in AWS; a broken bus must not break a launch or a termination.
            logger.exception("could not publish the state change of %s", sim.instance_id)

"""One simulated EC2 instance: a directory standing in for the disk, a metadata service, and real processes.

moto keeps an instance's record (id, type, subnet, state); :class:`SimulatedInstance` adds what the instance
*has*: its directory (``nvme/``, ``run/``, ``agent.log``), its GPUs and their ``nvidia-smi`` (``bin/``,
``gpu/``), its IMDS, the events of its life (booted, its SSM agent registered, ended, gone) and the processes
started on it, which termination, a kill or a hang end, every one of them: each carries :data:`INSTANCE_MARKER`,
so those the agent put in sessions of their own are found too.
:class:`spotrun.local.instances.fleet.InstanceManager` drives its life cycle.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spotrun.local.instances.agent_programs import instance_agent_script, resident_agent_argv
from spotrun.local.instances.gpus import SimulatedGpus
from spotrun.local.instances.imds import ImdsServer, InstanceMetadata, RoleCredentials
from spotrun.model.capacity.candidates import Lifecycle
from spotrun.model.contract_variables import ENV_PROGRESS_FILE

# Every process started on a simulated instance carries this variable, inherited by whatever it spawns, so
# termination finds them all even when the agent put its children in sessions of their own.
INSTANCE_MARKER = "SPOTRUN_LOCAL_INSTANCE_ID"
KILL_GRACE_SECONDS = 1.0
# In the environment of torchrun's workers only (see SimulatedInstance.rank_pids).
TORCHRUN_WORKER_VARIABLE = "TORCHELASTIC_RUN_ID"


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
        # Its private IPv4 as EC2 reports it (the runtime gives each instance a loopback address of its own).
        self.private_ip: str = model.private_ip_address or ""
        self.lifecycle: Lifecycle = lifecycle
        self.directory = root / self.instance_id
        self.nvme_dir = self.directory / "nvme"
        self.log_path = self.directory / "agent.log"
        self.run_dir = self.directory / "run"  # /run/spotrun: the resident agent's inbox and pid file
        self.nvme_dir.mkdir(parents=True, exist_ok=True)
        # Its GPUs and their nvidia-smi (bin/ first on its agent's PATH), as the type's AMI and driver give them.
        self.gpus = SimulatedGpus(
            self.instance_id, self.instance_type, self.directory, INSTANCE_MARKER, TORCHRUN_WORKER_VARIABLE
        )
        self.gpus.install()
        self.metadata = InstanceMetadata(
            instance_id=self.instance_id,
            instance_type=self.instance_type,
            availability_zone=self.availability_zone,
            lifecycle=lifecycle,
            region=region,
            ami_id=getattr(model, "image_id", "") or "",
            local_ipv4=self.private_ip,
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

    def training_pids(self) -> list[int]:
        """Ids of the live processes of the training command the agent runs (torchrun and its workers included).

        They are the instance's processes whose environment holds the checkpoint contract's progress file, which
        the agent sets for the training command only (``spotrun.agent.supervision.command_environment``) and its
        children inherit; the agents themselves do not carry it.
        """
        return _marked(self, ENV_PROGRESS_FILE)

    def rank_pids(self) -> list[int]:
        """Ids of the live processes that do the training's work: torchrun's workers (and their children) when
        the command runs under torchrun, otherwise every training process (:meth:`training_pids`).

        torchrun's elastic agent sets ``TORCHELASTIC_RUN_ID`` in each worker's environment
        (``torch/distributed/elastic/agent/server/local_elastic_agent.py``), never in its own.
        """
        workers = _marked(self, ENV_PROGRESS_FILE, TORCHRUN_WORKER_VARIABLE)
        return workers or self.training_pids()

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
            # A stopped process (chaos froze it) would only see SIGTERM once continued.
            self._signal_all(procs, signal.SIGCONT)
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


def _marked(instance: SimulatedInstance, *also: str) -> list[int]:
    """Pids of live processes carrying the instance's marker variable (Linux /proc; empty elsewhere).

    With ``also``, only those whose environment also sets every variable named.
    """
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
        variables = environ.split(b"\0")
        if needle not in variables or _state_field(stat) == "Z":
            continue
        if all(any(v.startswith(f"{name}=".encode()) for v in variables) for name in also):
            found.append(int(entry.name))
    return found


def _state_field(stat: str) -> str:
    """The state letter of a ``/proc/PID/stat`` line (after the command name, which may hold spaces)."""
    return stat.rsplit(")", 1)[-1].split()[0]


def wait_stopped(pids: Sequence[int], timeout: float = 5.0) -> None:
    """Block until every process in ``pids`` shows state ``T`` (stopped) or has gone, at most ``timeout`` s.

    ``kill(SIGSTOP)`` returns once the signal is queued; a process running on another core stops only when the
    kernel next delivers it (signal(7): a signal is pending until delivered), so ``/proc`` may still read ``R``.
    """
    deadline = time.monotonic() + timeout
    waiting = list(pids)
    while waiting and time.monotonic() < deadline:
        still = []
        for pid in waiting:
            try:
                if _state_field(Path(f"/proc/{pid}/stat").read_text()) not in ("T", "Z"):
                    still.append(pid)
            except OSError:
                continue
        waiting = still
        if waiting:
            time.sleep(0.005)

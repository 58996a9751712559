"""Injected failures: spot interruptions as AWS FIS sends them, silent deaths, hung training, and random reclaims.

An interruption follows ``aws:ec2:send-spot-instance-interruptions``: a rebalance recommendation (IMDS and
EventBridge), the interruption warning (IMDS ``spot/instance-action`` and an ``EC2 Spot Instance Interruption
Warning`` event), then termination when the notice runs out. Every duration is simulated time, scaled by the
runtime's clock. Each acts on one instance, named by its id: one node of a multi-node group is interrupted,
killed or hung while its peers run on.

A hung training (:meth:`Chaos.hang_training`) is what a stuck collective looks like from outside: the instance, its
agent, IMDS and SSM all answer, and under torchrun the launcher too (it keeps its rendezvous alive, so torch
elastic sees nothing wrong), but the ranks neither advance nor exit (SIGSTOP).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import os
import random
import signal
import threading
from collections.abc import Callable

from spotrun.local.capacity.pools import CapacityModel
from spotrun.local.clock import Clock, rfc3339, utc_now
from spotrun.local.instances.fleet import InstanceManager, Publisher
from spotrun.local.instances.instance import SimulatedInstance, wait_stopped
from spotrun.model.capacity.ec2_states import REBALANCE, SPOT_WARNING

logger = logging.getLogger(__name__)

SPOT_TERMINATION = (
    "Server.SpotInstanceTermination",
    "Server.SpotInstanceTermination: Spot instance termination",
)

# (instance id, state reason code, state reason message) -> None: terminates through EC2.
Terminator = Callable[[str, str, str], None]


class Chaos:
    """Failure injection for the instances of one runtime."""

    def __init__(
        self,
        manager: InstanceManager,
        clock: Clock,
        publish: Publisher,
        terminate: Terminator,
        account_id: str,
        seed: int = 0,
    ):
        self.manager = manager
        self.clock = clock
        self.publish = publish
        self.terminate = terminate
        self.account_id = account_id
        self._rng = random.Random(seed)  # noqa: S311 - a simulation, not security
        self._interrupted: set[str] = set()
        self._frozen: dict[str, set[int]] = {}  # instance id -> training processes hang_training stopped
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._hazards: threading.Thread | None = None

    def _instance(self, instance_id: str) -> SimulatedInstance:
        sim = self.manager.get(instance_id)
        if sim is None:
            raise KeyError(f"no simulated instance {instance_id}")
        return sim

    def interrupt(
        self, instance_id: str, notice_seconds: float = 120.0, rebalance_lead_seconds: float = 0.0
    ) -> threading.Event:
        """Reclaim a spot instance: rebalance recommendation, warning, termination after the notice.

        Parameters
        ----------
        instance_id
            A spot instance launched by the runtime.
        notice_seconds
            Simulated seconds between the warning and termination (120 on AWS).
        rebalance_lead_seconds
            Simulated seconds between the rebalance recommendation and the warning.

        Returns
        -------
        threading.Event
            Set once the instance is gone (processes dead, metadata service stopped).

        Raises
        ------
        ValueError
            When the instance is not a spot instance.
        """
        sim = self._instance(instance_id)
        if sim.lifecycle != "spot":
            raise ValueError(
                f"{instance_id} is {sim.lifecycle}: only spot instances receive interruption notices"
            )
        with self._lock:
            if instance_id in self._interrupted:
                return sim.gone
            self._interrupted.add(instance_id)
        sim.metadata.set_rebalance(rfc3339(utc_now()))
        self._event(sim, REBALANCE, {"instance-id": instance_id})
        self.clock.call_later(rebalance_lead_seconds, self._warn, sim, notice_seconds)
        return sim.gone

    def _warn(self, sim: SimulatedInstance, notice_seconds: float) -> None:
        if sim.ended.is_set():
            return
        ends = utc_now() + dt.timedelta(seconds=self.clock.scaled(notice_seconds))
        # The notice carries the real end of the (scaled) notice: that is what the agent can rely on.
        sim.metadata.set_instance_action("terminate", rfc3339(ends))
        self._event(sim, SPOT_WARNING, {"instance-id": sim.instance_id, "instance-action": "terminate"})
        self.clock.call_later(notice_seconds, self._reclaim, sim)

    def _reclaim(self, sim: SimulatedInstance) -> None:
        if not sim.terminating:
            self.terminate(sim.instance_id, *SPOT_TERMINATION)

    def kill(self, instance_id: str, hang: bool = False) -> threading.Event:
        """Kill an instance without notice: its processes get SIGKILL, with no chance to checkpoint.

        Parameters
        ----------
        instance_id
            The instance.
        hang
            False: EC2 terminates the instance (state-change events follow). True: EC2 keeps reporting it
            running, but it answers nothing (no IMDS, no SSM) until someone terminates it.

        Returns
        -------
        threading.Event
            Set once the processes are dead (for ``hang``, at return).
        """
        sim = self._instance(instance_id)
        if hang:
            self.manager.hang(sim)
            done = threading.Event()
            done.set()
            return done
        sim.shutdown_grace = 0.0
        self.terminate(instance_id, "Server.InternalError", "Server.InternalError: Internal error on launch")
        return sim.gone

    def hang_training(self, instance_id: str) -> list[int]:
        """Freeze the training on an instance: its ranks stop (SIGSTOP), everything else runs on.

        The ranks are torchrun's workers when the command runs under torchrun (torchrun itself runs on, as it does
        when a collective hangs), otherwise the training command's processes
        (:meth:`~spotrun.local.instances.instance.SimulatedInstance.rank_pids`). The agent stays alive and
        reachable (heartbeats, IMDS, SSM); the training neither advances nor dies. The processes stay frozen until
        :meth:`resume_training`, a SIGKILL, or the instance's termination.

        Parameters
        ----------
        instance_id
            A running instance whose agent runs a training command.

        Returns
        -------
        list[int]
            The ids of the processes stopped.

        Raises
        ------
        RuntimeError
            When the instance is not reachable, or no training process runs on it.
        """
        sim = self._instance(instance_id)
        if not sim.reachable:
            raise RuntimeError(f"{instance_id} is not running")
        stopped: list[int] = []
        # Twice: a parent caught between its scan and its stop may have started a child meanwhile.
        for _ in range(2):
            for pid in sim.rank_pids():
                if pid not in stopped:
                    try:
                        os.kill(pid, signal.SIGSTOP)
                    except ProcessLookupError:
                        continue
                    stopped.append(pid)
        if not stopped:
            raise RuntimeError(f"no training process runs on {instance_id}")
        wait_stopped(stopped)
        with self._lock:
            self._frozen.setdefault(instance_id, set()).update(stopped)
        logger.info("training hung on %s: stopped %s", instance_id, stopped)
        return stopped

    def resume_training(self, instance_id: str) -> list[int]:
        """Let the processes :meth:`hang_training` froze on an instance run again (SIGCONT).

        Returns
        -------
        list[int]
            The ids of the processes continued (those still alive).
        """
        with self._lock:
            frozen = self._frozen.pop(instance_id, set())
        resumed = []
        for pid in sorted(frozen):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                continue
            resumed.append(pid)
        return resumed

    def start_hazards(self, capacity: CapacityModel, tick_seconds: float = 0.1) -> None:
        """Reclaim running spot instances at random, at the hazard rate of their pool (if any is non-zero)."""
        if self._hazards is not None or not any(p.interruption_hazard_per_hour > 0 for p in capacity.pools()):
            return

        def loop() -> None:
            simulated_tick = tick_seconds / self.clock.time_scale
            while not self._stop.wait(tick_seconds):
                for sim in self.manager.all():
                    pool = capacity.pool(sim.instance_type, sim.availability_zone)
                    if not pool or not pool.interruption_hazard_per_hour or not sim.reachable:
                        continue
                    if sim.lifecycle != "spot" or sim.instance_id in self._interrupted:
                        continue
                    chance = 1.0 - math.exp(-pool.interruption_hazard_per_hour * simulated_tick / 3600.0)
                    if self._rng.random() < chance:
                        logger.info("reclaiming %s (pool hazard)", sim.instance_id)
                        self.interrupt(sim.instance_id)

        self._hazards = threading.Thread(target=loop, name="spot-hazards", daemon=True)
        self._hazards.start()

    def close(self) -> None:
        """Stop random reclaims (timers already scheduled are the clock's to cancel)."""
        self._stop.set()
        if self._hazards is not None:
            self._hazards.join(timeout=5)
            self._hazards = None

    def _event(self, sim: SimulatedInstance, detail_type: str, detail: dict[str, str]) -> None:
        # AWS puts the zone where the region normally stands in these ARNs; consumers must cope.
        arn = f"arn:aws:ec2:{sim.availability_zone}:{self.account_id}:instance/{sim.instance_id}"
        try:
            self.publish("aws.ec2", detail_type, detail, [arn])
        except Exception:
            logger.exception("could not publish %s for %s", detail_type, sim.instance_id)

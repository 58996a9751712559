"""The simulated EC2 instances of one runtime and their life cycle.

moto keeps an instance's record (id, type, subnet, state); :class:`InstanceManager` adds what an instance
*does* (each one a :class:`~spotrun.local.instances.instance.SimulatedInstance`): it boots for the pool's delay
(moto reports ``pending`` meanwhile), holds a pool slot, answers IMDS, runs the agent processes SSM starts, and
on termination kills them and frees the slot. State changes are published as ``EC2 Instance State-change
Notification`` events, as EC2 does.

At boot, before the SSM agent registers, each instance starts its own resident agent (``python -m spotrun.agent
serve``, what the user data's systemd unit starts on EC2) with its inbox under the instance's directory; SSM
delivery plays the agent document's own script, with the instance's directory standing in for ``/run/spotrun``
and ``/var/log``, so a step is handed to the resident agent when it is alive and started as a fresh process
otherwise (:mod:`spotrun.local.instances.agent_programs`).

Its SSM agent registers some time after EC2 reports ``running`` (the agent starts late in the boot, then
registers with the SSM endpoint): until then SSM does not list the instance as a managed node and
SendCommand answers ``InvalidInstanceId``, whose documented causes include "SSM Agent isn't registered with
the SSM endpoint" (https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_SendCommand.html).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from spotrun.local.capacity.pools import CapacityModel
from spotrun.local.clock import Clock
from spotrun.local.instances.addresses import LoopbackAddresses, give_private_ip
from spotrun.local.instances.imds import RoleCredentials
from spotrun.local.instances.instance import SimulatedInstance
from spotrun.model.capacity.candidates import Lifecycle
from spotrun.model.capacity.ec2_states import STATE_CHANGE

logger = logging.getLogger(__name__)

DEFAULT_BOOT_DELAY_SECONDS = 60.0
# How long an instance's role session lasts: EC2 rotates them well before; six hours is what IMDS serves at most
# ("at least five minutes before the expiration of the old credentials",
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-security-credentials.html).
INSTANCE_CREDENTIALS_LIFETIME = timedelta(hours=6)
# Simulated seconds from EC2 "running" to the SSM agent being registered and Online. Longer than the
# workflow's readiness poll at any time scale, so a control plane that skipped the wait would be caught.
DEFAULT_SSM_REGISTRATION_DELAY_SECONDS = 60.0

# (source, detail-type, detail, resources) -> None
Publisher = Callable[[str, str, dict[str, Any], list[str]], None]
# The environment the instance's resident agent starts with (what the user data gives its systemd unit).
ResidentEnvironment = Callable[[SimulatedInstance], Mapping[str, str]]


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
        # Each live instance's private IPv4, a loopback address of its own (held until the instance is gone).
        self.addresses = LoopbackAddresses()
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
        """Take over an instance moto just created: give it its own loopback address as its private IPv4, hold its
        slot, report pending, boot it after the delay."""
        give_private_ip(model, self.addresses.take(model.id))
        # Each instance its own session of the role: EC2 names it after the instance.
        credentials = self._credentials() if self.instance_role else None
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

    def _credentials(self) -> RoleCredentials:
        """A new session of the instance role, expiring by the emulator's clock (as the judge reads it)."""
        issued = RoleCredentials.issue(self.instance_role, INSTANCE_CREDENTIALS_LIFETIME)
        return dataclasses.replace(issued, expiration=self.clock.now() + INSTANCE_CREDENTIALS_LIFETIME)

    def _boot(self, sim: SimulatedInstance) -> None:
        with self._lock:
            if sim.model.state != "pending" or sim.ended.is_set():
                return
            sim.model._state.name, sim.model._state.code = "running", 16
            sim.booted.set()
        # The SSM agent's registration counts from "running", whatever the emulator then spends publishing the
        # state change (its handlers run in this process) and starting the resident agent.
        self.clock.call_later(self.ssm_registration_delay_seconds, sim.registered.set)
        self._state_change(sim, "running")
        if self.resident_environment is not None:
            # The user data's unit starts it as early in boot as it can: before the SSM agent registers.
            try:
                sim.start_resident_agent(self.resident_environment(sim))
            except RuntimeError as exc:  # it ended meanwhile
                logger.info("no resident agent on %s: %s", sim.instance_id, exc)

    def can_receive(self, instance_id: str) -> bool:
        """Whether SSM can deliver a command to ``instance_id``: launched here, reachable, its SSM agent registered."""
        sim = self.get(instance_id)
        return sim is not None and sim.managed

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
            # Its processes are dead: nothing listens on its address any more, which a later instance may take.
            self.addresses.release(sim.instance_id)
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
            self.addresses.release(sim.instance_id)
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

"""What a test does to and asks of the runtime's simulated fleet: find its instances, wait for them, reclaim,
kill, hang and resume them, and drive what their GPUs read.

:class:`FleetControls` is a base of :class:`spotrun.local.runtime.LocalRuntime`, which sets its instance manager
and its :class:`~spotrun.local.chaos.interruptions.Chaos`.
"""

from __future__ import annotations

import threading
from typing import Any

from spotrun.local.chaos.interruptions import Chaos
from spotrun.local.instances.fleet import InstanceManager
from spotrun.local.instances.instance import SimulatedInstance


class FleetControls:
    """The runtime's simulated instances, and the failures a test injects into them."""

    manager: InstanceManager
    chaos: Chaos

    # ------------------------------------------------------------------------------------- instances

    @property
    def instances(self) -> list[SimulatedInstance]:
        """Every instance launched so far (terminated ones too), with state, type, zone, lifecycle, pids."""
        return self.manager.all()

    def instance(self, instance_id: str) -> SimulatedInstance:
        """The simulated instance ``instance_id``."""
        sim = self.manager.get(instance_id)
        if sim is None:
            raise KeyError(instance_id)
        return sim

    def running_instance_ids(self) -> list[str]:
        """Ids of the instances that are booted and running."""
        return [sim.instance_id for sim in self.manager.all() if sim.reachable]

    def wait_running(self, instance_id: str, timeout: float = 30.0) -> bool:
        """Wait until ``instance_id`` has booted; False on timeout or when it ended first."""
        return self.instance(instance_id).wait_running(timeout)

    def wait_managed(self, instance_id: str, timeout: float = 30.0) -> bool:
        """Wait until SSM can send ``instance_id`` commands (booted, SSM agent registered); False on timeout."""
        return self.instance(instance_id).wait_managed(timeout)

    # ----------------------------------------------------------------------------------------- chaos

    def interrupt(
        self, instance_id: str, notice_seconds: float = 120.0, rebalance_lead_seconds: float = 0.0
    ) -> threading.Event:
        """Reclaim a spot instance as AWS FIS does; see :meth:`spotrun.local.chaos.interruptions.Chaos.interrupt`."""
        return self.chaos.interrupt(instance_id, notice_seconds, rebalance_lead_seconds)

    def kill(self, instance_id: str, hang: bool = False) -> threading.Event:
        """Kill an instance without notice; see :meth:`spotrun.local.chaos.interruptions.Chaos.kill`."""
        return self.chaos.kill(instance_id, hang)

    def hang_training(self, instance_id: str) -> list[int]:
        """Freeze one instance's training (SIGSTOP); see :class:`~spotrun.local.chaos.interruptions.Chaos`."""
        return self.chaos.hang_training(instance_id)

    def resume_training(self, instance_id: str) -> list[int]:
        """Continue what :meth:`hang_training` froze (SIGCONT)."""
        return self.chaos.resume_training(instance_id)

    # ------------------------------------------------------------------------------------------ GPUs

    def set_gpu(
        self,
        instance_id: str,
        utilization: float | None = None,
        memory_percent: float | None = None,
        gpu: int | None = None,
    ) -> list[dict[str, Any]]:
        """Make an instance's GPUs (or GPU ``gpu``) read ``utilization`` / ``memory_percent`` (0-100) in its
        ``nvidia-smi`` until :meth:`reset_gpu`, whatever its training does.

        Returns
        -------
        list[dict]
            Each GPU of the instance: ``{index, uuid, utilization, memory_percent}`` (None: follows the training).

        Raises
        ------
        KeyError
            When the runtime launched no such instance.
        ValueError
            When the instance has no GPU, a value is out of range, or ``gpu`` is not one of its indexes.
        """
        return self.instance(instance_id).gpus.drive(utilization, memory_percent, gpu)

    def reset_gpu(self, instance_id: str) -> list[dict[str, Any]]:
        """Let an instance's GPUs read from its training again: busy while it runs, idle otherwise."""
        return self.instance(instance_id).gpus.reset()

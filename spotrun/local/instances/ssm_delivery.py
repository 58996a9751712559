"""SSM's deliveries to the agents of the runtime's simulated instances, and the environment they start with.

The emulator's SSM (:mod:`spotrun.local.patches.ssm`) hands each command for the agent document to
:meth:`AgentDelivery.deliver`, which plays the document's script on the instance as the SSM Agent does with an
``ENV_VAR`` parameter (:meth:`~spotrun.local.instances.instance.SimulatedInstance.run_agent_script`); the
instance manager starts each instance's resident agent at boot with :meth:`AgentDelivery.resident_environment`.
Both see the instance as on EC2 (:func:`spotrun.local.instances.agent_environment.agent_environment`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

from spotrun.local.handler_environment import ProcessEnvironment
from spotrun.local.instances.agent_environment import agent_environment
from spotrun.local.instances.agent_programs import default_agent_argv
from spotrun.local.instances.instance import SimulatedInstance
from spotrun.model.agent_protocol.ssm_document import AGENT_COMMAND_VARIABLE

logger = logging.getLogger(__name__)


class AgentDelivery:
    """Starts the agent processes of the runtime's simulated instances.

    Parameters
    ----------
    instance
        The simulated instance of an id (raises ``KeyError`` for one the runtime did not launch).
    agent_argv
        Program the document's script falls back to, the command URI appended; None: the real agent, which then
        also serves as each instance's resident agent (a stand-in agent command cannot serve).
    environment
        The variables the runtime set for its functions (endpoints, ``SPOTRUN_*``), read at each start.
    api_url
        The REST API stand-in's URL ("" when the deployment has none), read at each start.
    """

    def __init__(
        self,
        instance: Callable[[str], SimulatedInstance],
        agent_argv: Sequence[str] | None,
        environment: ProcessEnvironment,
        api_url: Callable[[], str],
    ):
        self.instance = instance
        self.argv = list(agent_argv) if agent_argv is not None else default_agent_argv()
        self.serves = agent_argv is None  # whether instances start a resident agent at boot
        self.environment = environment
        self.api_url = api_url

    def resident_environment(self, sim: SimulatedInstance) -> dict[str, str]:
        """The environment of ``sim``'s resident agent, as the user data gives its systemd unit."""
        return agent_environment(sim, self._base(), self.api_url(), "", {})

    def deliver(self, instance_id: str, parameters: dict[str, str], command_id: str) -> None:
        """Run the agent document's script on ``instance_id`` for one SSM command, its parameters in the environment.

        Raises
        ------
        KeyError
            When the runtime launched no instance ``instance_id``.
        RuntimeError
            When the instance is not running.
        """
        sim = self.instance(instance_id)
        env = agent_environment(sim, self._base(), self.api_url(), command_id, parameters)
        proc = sim.run_agent_script(self.argv, AGENT_COMMAND_VARIABLE, env)
        logger.info("agent pid %s started on %s for %s", proc.pid, instance_id, parameters)

    def _base(self) -> dict[str, str]:
        return {**os.environ, **self.environment.values}

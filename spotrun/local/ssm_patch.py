"""SSM Run Command that reaches simulated instances.

moto's ``send_command`` reports Success, runs nothing, accepts any instance id and, whenever ``Targets`` is
empty, adds every instance of the region to the command (naming ``InstanceIds`` does not prevent it). The
replacement checks the named instances the way AWS does (``InvalidInstanceId`` unless running and managed),
keeps the command to those instances, and for the agent's document starts the agent on each of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from spotrun.local.patches import PatchSet

logger = logging.getLogger(__name__)

# (instance id, command URI, command id) -> None; raises when the agent cannot be started.
AgentStarter = Callable[[str, str, str], None]
PLUGIN_NAME = "aws:runShellScript"


def _invalid_instance(instance_ids: list[str], account_id: str) -> Exception:
    from moto.ssm.exceptions import SSMException

    names = ", ".join(f"[{iid}]" for iid in instance_ids)
    return SSMException(
        "InvalidInstanceId", f"Instances [{names}] not in a valid state for account {account_id}"
    )


def install(
    patches: PatchSet,
    agent_document_name: str,
    can_receive: Callable[[str], bool],
    start_agent: AgentStarter,
) -> None:
    """Patch moto's SSM backend so that the agent document starts the agent on the named instances.

    Parameters
    ----------
    patches
        Where the patch is recorded.
    agent_document_name
        Name of the project's SSM document (``SHAPE.agent_document_name``).
    can_receive
        Whether an instance id names a running, booted simulated instance.
    start_agent
        Starts the agent for one instance and command URI.
    """
    from moto.ssm.models import SimpleSystemManagerBackend

    original = SimpleSystemManagerBackend.send_command

    def send_command(self: Any, **kwargs: Any) -> Any:
        named = list(kwargs.get("instance_ids") or [])
        unreachable = [iid for iid in named if not can_receive(iid)]
        if unreachable:
            raise _invalid_instance(unreachable, self.account_id)
        command = original(self, **kwargs)
        if not kwargs.get("targets"):
            command.instance_ids = named
            command.target_count = command.completed_count = len(named)
            command.invocations = [command.invocation_response(iid, PLUGIN_NAME) for iid in named]
        if kwargs.get("document_name") == agent_document_name:
            uri = (kwargs.get("parameters") or {}).get("commandUri", [""])[0]
            for invocation in command.invocations:
                _deliver(command, invocation, uri, start_agent)
        return command

    patches.add(SimpleSystemManagerBackend, "send_command", send_command)


def _deliver(command: Any, invocation: dict[str, Any], uri: str, start_agent: AgentStarter) -> None:
    try:
        start_agent(invocation["InstanceId"], uri, command.command_id)
    except Exception as exc:
        logger.warning("could not start the agent on %s: %s", invocation["InstanceId"], exc)
        invocation.update(
            Status="Failed", StatusDetails="Failed", ResponseCode=1, StandardErrorContent=str(exc)
        )
        command.error_count += 1
        command.completed_count -= 1
        command.status = command.status_details = "Failed"

"""SSM Run Command that reaches simulated instances.

moto's ``send_command`` reports Success, runs nothing, accepts any instance id and, whenever ``Targets`` is
empty, adds every instance of the region to the command (naming ``InstanceIds`` does not prevent it). The
replacement checks the named instances the way AWS does (``InvalidInstanceId`` unless running and managed),
keeps the command to those instances, and for the agent's document starts the agent on each of them.

Before anything runs, SendCommand checks the parameters against the document the way SSM does: a name the
document does not declare, a required one left out, or a value that does not match its ``allowedPattern``
answers ``InvalidParameters`` (https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_SendCommand.html).
moto checks none of it. A parameter declared with ``interpolationType: ENV_VAR`` reaches the instance as the
environment variable ``SSM_<name>``, never as text of the script
(https://docs.aws.amazon.com/systems-manager/latest/userguide/documents-syntax-data-elements-parameters.html).

moto 5.2.5 has no ``DescribeInstanceInformation`` at all (the action is unknown to its SSM responses). The one
added here lists the managed nodes the way AWS does: a node appears once its SSM agent has registered, with
``PingStatus`` ``Online`` (``ConnectionLost`` when the agent stopped answering), and never once it is
terminated. https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_DescribeInstanceInformation.html
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from spotrun.local.patches.reversible import PatchSet

logger = logging.getLogger(__name__)

# (instance id, the command's SSM_ environment variables, command id) -> None; raises when the agent cannot start.
AgentStarter = Callable[[str, dict[str, str], str], None]
# () -> {instance id: PingStatus} of the registered nodes.
ManagedNodes = Callable[[], dict[str, str]]
PLUGIN_NAME = "aws:runShellScript"


def _invalid_instance(instance_ids: list[str], account_id: str) -> Exception:
    from moto.ssm.exceptions import SSMException

    names = ", ".join(f"[{iid}]" for iid in instance_ids)
    return SSMException(
        "InvalidInstanceId", f"Instances [{names}] not in a valid state for account {account_id}"
    )


def _invalid_parameters(message: str) -> Exception:
    from moto.ssm.exceptions import SSMException

    return SSMException("InvalidParameters", message)


def check_parameters(content: dict[str, Any], parameters: dict[str, list[str]]) -> dict[str, str]:
    """Check SendCommand's ``parameters`` against a document's declarations, as SSM does before running it.

    Parameters
    ----------
    content
        The document's content (its ``parameters`` declarations).
    parameters
        SendCommand's ``Parameters``: name -> values.

    Returns
    -------
    dict[str, str]
        The environment the instance's script gets: ``SSM_<name>`` for each parameter declared with
        ``interpolationType: ENV_VAR`` (its value, or its default when none was given).

    Raises
    ------
    SSMException
        ``InvalidParameters``: a name the document does not declare, a required parameter (no default) left
        out, or a value that does not match the parameter's ``allowedPattern`` (the whole value).
    """
    declared: dict[str, dict[str, Any]] = content.get("parameters") or {}
    unknown = sorted(set(parameters) - set(declared))
    if unknown:
        raise _invalid_parameters(
            f"Parameters {unknown} are not defined in the document; you can only supply values to parameters "
            "defined in the SSM document"
        )
    environment: dict[str, str] = {}
    for name, spec in declared.items():
        if name in parameters:
            values = [str(value) for value in parameters[name]]
        elif "default" in spec:
            values = [str(spec["default"])]
        else:
            raise _invalid_parameters(f"Parameter {name!r} is required: the document declares no default")
        pattern = spec.get("allowedPattern")
        for value in values:
            if pattern is not None and re.fullmatch(pattern, value) is None:
                raise _invalid_parameters(
                    f"Parameter {name!r} value {value!r} failed to satisfy constraint: "
                    f"it must match the pattern {pattern}"
                )
        if spec.get("interpolationType") == "ENV_VAR":
            environment[f"SSM_{name}"] = " ".join(values)
    return environment


def install(
    patches: PatchSet,
    agent_document_name: str,
    can_receive: Callable[[str], bool],
    start_agent: AgentStarter,
    managed_nodes: ManagedNodes,
) -> None:
    """Patch moto's SSM backend so that the agent document starts the agent on the named instances.

    Parameters
    ----------
    patches
        Where the patch is recorded.
    agent_document_name
        Name of the project's SSM document (``SHAPE.agent_document_name``).
    can_receive
        Whether an instance id names a running simulated instance whose SSM agent has registered.
    start_agent
        Starts the agent on one instance, with the command's ``SSM_`` environment variables.
    managed_nodes
        The registered instances and their PingStatus, for ``DescribeInstanceInformation``.
    """
    from moto.ssm.models import SimpleSystemManagerBackend

    original = SimpleSystemManagerBackend.send_command

    def send_command(self: Any, **kwargs: Any) -> Any:
        named = list(kwargs.get("instance_ids") or [])
        unreachable = [iid for iid in named if not can_receive(iid)]
        if unreachable:
            raise _invalid_instance(unreachable, self.account_id)
        # moto holds the documents created in it, not AWS's own (AWS-RunShellScript): those go unchecked.
        documents = self._documents.get(kwargs.get("document_name"))
        environment = (
            check_parameters(documents.get_default_version().content_json, kwargs.get("parameters") or {})
            if documents is not None
            else {}
        )
        command = original(self, **kwargs)
        if not kwargs.get("targets"):
            command.instance_ids = named
            command.target_count = command.completed_count = len(named)
            command.invocations = [command.invocation_response(iid, PLUGIN_NAME) for iid in named]
        if kwargs.get("document_name") == agent_document_name:
            for invocation in command.invocations:
                _deliver(command, invocation, environment, start_agent)
        return command

    patches.add(SimpleSystemManagerBackend, "send_command", send_command)
    install_instance_information(patches, managed_nodes)


def install_instance_information(patches: PatchSet, managed_nodes: ManagedNodes) -> None:
    """Add ``DescribeInstanceInformation`` to moto's SSM, listing ``managed_nodes()``."""
    from moto.ssm.responses import SimpleSystemManagerResponse

    patches.add(
        SimpleSystemManagerResponse,
        "describe_instance_information",
        _describe_instance_information(managed_nodes),
    )


def instance_information(
    nodes: dict[str, str], filters: list[dict[str, Any]], legacy_filters: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The ``InstanceInformationList`` for the registered ``nodes`` (id -> PingStatus), filtered.

    ``Filters`` (``Key``/``Values``) only narrow the list. The legacy ``InstanceInformationFilterList``
    (``key``/``valueSet``) naming an instance that is not a managed node answers ``InvalidInstanceId``, as AWS
    documents for an id that "isn't valid".
    """
    wanted_ids: set[str] | None = None
    wanted_status: set[str] | None = None
    for item in filters:
        values = set(item.get("Values") or [])
        if item.get("Key") == "InstanceIds":
            wanted_ids = values if wanted_ids is None else wanted_ids & values
        elif item.get("Key") == "PingStatus":
            wanted_status = values
    for item in legacy_filters:
        values = set(item.get("valueSet") or [])
        if item.get("key") == "InstanceIds":
            unknown = sorted(values - set(nodes))
            if unknown:
                raise _invalid_instance(unknown, "")
            wanted_ids = values if wanted_ids is None else wanted_ids & values
        elif item.get("key") == "PingStatus":
            wanted_status = values
    now = time.time()
    return [
        {
            "InstanceId": instance_id,
            "PingStatus": status,
            "LastPingDateTime": now,
            "AgentVersion": "3.3.0.0",
            "IsLatestVersion": True,
            "PlatformType": "Linux",
            "PlatformName": "Amazon Linux",
            "ResourceType": "EC2Instance",
        }
        for instance_id, status in sorted(nodes.items())
        if (wanted_ids is None or instance_id in wanted_ids)
        and (wanted_status is None or status in wanted_status)
    ]


def _describe_instance_information(managed_nodes: ManagedNodes) -> Callable[[Any], Any]:
    def describe_instance_information(self: Any) -> Any:
        from moto.core.responses import ActionResult

        listed = instance_information(
            managed_nodes(),
            self._get_param("Filters") or [],
            self._get_param("InstanceInformationFilterList") or [],
        )
        return ActionResult({"InstanceInformationList": listed})

    return describe_instance_information


def _deliver(
    command: Any, invocation: dict[str, Any], environment: dict[str, str], start_agent: AgentStarter
) -> None:
    try:
        start_agent(invocation["InstanceId"], environment, command.command_id)
    except Exception as exc:
        logger.warning("could not start the agent on %s: %s", invocation["InstanceId"], exc)
        invocation.update(
            Status="Failed", StatusDetails="Failed", ResponseCode=1, StandardErrorContent=str(exc)
        )
        command.error_count += 1
        command.completed_count -= 1
        command.status = command.status_details = "Failed"

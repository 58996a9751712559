"""How a multi-node group launches: its launch template (with an EFA or not), its cluster placement group per
subnet, and the libfabric/NCCL environment its nodes run with when they have an EFA.

Pure: the acquire path (:func:`group_launch_template`, :func:`placement_groups`) and the agent
(:func:`efa_environment`) read these; nothing here calls AWS.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from spotrun.model.capacity.instance_types import InstanceTypeInfo

# The environment the AWS Deep Learning AMI documents for NCCL over EFA ("Using EFA on the DLAMI",
# https://docs.aws.amazon.com/dlami/latest/devguide/tutorial-efa-using.html): libfabric's EFA provider
# (FI_PROVIDER="efa", which aws-ofi-nccl then selects), fork safety of the RDMA memory registrations
# (RDMAV_FORK_SAFE=1: PyTorch's DataLoader forks workers), and NCCL_DEBUG=INFO, whose log line
# "NET/OFI Selected Provider is efa" is the only proof a run used the EFA. The DLAMI's EFA installer puts
# /opt/amazon/efa on the loader path itself, so LD_LIBRARY_PATH is left alone.
EFA_ENVIRONMENT: Mapping[str, str] = MappingProxyType(
    {"FI_PROVIDER": "efa", "RDMAV_FORK_SAFE": "1", "NCCL_DEBUG": "INFO"}
)
"""Variables every node of a group with an EFA sets for its training command (see :func:`efa_environment`)."""

# GPUDirect RDMA over EFA (FI_EFA_USE_DEVICE_RDMA=1, "to use EFA's RDMA functionality", the same DLAMI page)
# exists on the Nitro v4 GPU types only: p4d, p4de, p5 and p5e among spotrun's
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types, "RDMA read support").
EFA_RDMA_FAMILIES: frozenset[str] = frozenset({"p4d", "p4de", "p5", "p5e"})


def efa_environment(instance_type: str) -> dict[str, str]:
    """The libfabric and NCCL variables for a node of ``instance_type`` launched with an EFA.

    Parameters
    ----------
    instance_type
        The node's EC2 instance type, e.g. ``p4d.24xlarge``.

    Returns
    -------
    dict[str, str]
        :data:`EFA_ENVIRONMENT`, plus ``FI_EFA_USE_DEVICE_RDMA=1`` on the types with GPUDirect RDMA
        (:data:`EFA_RDMA_FAMILIES`).
    """
    environment = dict(EFA_ENVIRONMENT)
    if instance_type.split(".", 1)[0] in EFA_RDMA_FAMILIES:
        environment["FI_EFA_USE_DEVICE_RDMA"] = "1"
    return environment


def uses_efa(candidates: Sequence[InstanceTypeInfo], *, nodes: int, efa_wanted: bool) -> bool:
    """Whether a group launches with an EFA: several nodes, the manifest wants one, every candidate has one.

    The rule :func:`group_launch_template` applies, for callers that show it without launching (the plan).
    """
    return nodes > 1 and efa_wanted and bool(candidates) and all(info.efa for info in candidates)


def group_launch_template(
    candidates: Sequence[InstanceTypeInfo],
    *,
    nodes: int,
    efa_wanted: bool,
    launch_template_name: str,
    efa_launch_template_name: str,
) -> tuple[str, bool]:
    """The launch template of one fleet request, and whether its instances get an EFA.

    A fleet request names one launch template for all its overrides, and an EFA interface in a template makes
    EC2 refuse every type without EFA support. So the EFA template is chosen only when the group has several
    nodes, the manifest wants an EFA (``resources.efa``), and *every* candidate type offers one; otherwise the
    deployment's plain template, whose nodes talk over their ordinary network interface.

    Parameters
    ----------
    candidates
        The types the request offers (:attr:`InstanceTypeInfo.efa` says which support an EFA).
    nodes
        Instances in the group.
    efa_wanted
        The manifest's ``resources.efa``.
    launch_template_name, efa_launch_template_name
        The deployment's two templates (settings ``launch_template_name``, ``efa_launch_template_name``).

    Returns
    -------
    tuple[str, bool]
        The template's name, and True when it is the EFA template.

    Raises
    ------
    ValueError
        For no candidates, fewer than one node, or the EFA template wanted but not deployed (an empty name).
    """
    if not candidates:
        raise ValueError("no candidate instance types")
    if nodes < 1:
        raise ValueError(f"nodes must be at least 1, got {nodes}")
    if uses_efa(candidates, nodes=nodes, efa_wanted=efa_wanted):
        if not efa_launch_template_name:
            raise ValueError("the deployment names no EFA launch template (setting efa_launch_template_name)")
        return efa_launch_template_name, True
    return launch_template_name, False


def placement_groups(subnet_ids: Sequence[str], placement_group_names: Sequence[str]) -> dict[str, str]:
    """Subnet id -> the deployment's cluster placement group for it, from the two settings in their order.

    A cluster placement group lives in one Availability Zone
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html), so the deployment makes one
    per subnet, listed in the order of ``subnet_ids``; :func:`~spotrun.model.capacity.fleet_request.
    build_fleet_request` takes this mapping as its ``placement_groups``.

    Parameters
    ----------
    subnet_ids
        The setting ``subnet_ids``.
    placement_group_names
        The setting ``placement_group_names``, one per subnet, in the same order.

    Returns
    -------
    dict[str, str]
        One entry per subnet.

    Raises
    ------
    ValueError
        When the two lists differ in length (a deployment that does not match the code).
    """
    if len(subnet_ids) != len(placement_group_names):
        raise ValueError(
            f"{len(placement_group_names)} placement groups for {len(subnet_ids)} subnets: the deployment "
            "makes one per subnet (settings placement_group_names and subnet_ids); redeploy the stack"
        )
    return dict(zip(subnet_ids, placement_group_names, strict=True))

"""One CreateFleet call, for one instance or a whole group, and where a group's nodes are placed."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spotrun.control.ports import Compute, DeploymentSettings
from spotrun.model.capacity.candidates import Lifecycle
from spotrun.model.capacity.fleet_request import (
    FleetLaunchError,
    LaunchedInstance,
    build_fleet_request,
    fleet_errors,
    parse_fleet_response,
)
from spotrun.model.capacity.group_launch import group_launch_template, placement_groups
from spotrun.model.capacity.instance_types import InstanceTypeInfo
from spotrun.model.errors import CapacityUnavailable


@dataclass(frozen=True)
class GroupSite:
    """Where a multi-node job's nodes go: one cluster placement group per subnet, and the EFA launch template.

    Attributes
    ----------
    subnet_ids
        The deployment's subnets.
    placement_group_names
        One cluster placement group per subnet, in the order of ``subnet_ids`` (a cluster placement group lives
        in one zone, https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html).
    efa_launch_template_name
        The launch template whose network interface is an EFA.
    """

    subnet_ids: tuple[str, ...] = ()
    placement_group_names: tuple[str, ...] = ()
    efa_launch_template_name: str = ""

    @classmethod
    def of(cls, settings: DeploymentSettings) -> GroupSite:
        """The deployment's placement groups and EFA template."""
        return cls(
            subnet_ids=tuple(settings.subnet_ids),
            placement_group_names=tuple(settings.placement_group_names),
            efa_launch_template_name=settings.efa_launch_template_name,
        )

    def placements(self, subnets: Mapping[str, str], nodes: int) -> dict[str, str] | None:
        """Subnet id -> its placement group, for the subnets launched into; None for one node.

        Raises
        ------
        ValueError
            When the deployment declares no placement group for a subnet a group would launch into.
        """
        if nodes < 2:
            return None
        by_subnet = placement_groups(self.subnet_ids, self.placement_group_names)
        missing = sorted(subnet for subnet in subnets if subnet not in by_subnet)
        if missing:
            raise ValueError(f"the deployment has no placement group for subnet(s) {', '.join(missing)}")
        return {subnet: by_subnet[subnet] for subnet in subnets}

    def template(
        self, candidates: Sequence[InstanceTypeInfo], nodes: int, efa_wanted: bool, default: str
    ) -> str:
        """The launch template of the request: the EFA one for a group whose every type offers EFA."""
        if nodes < 2 or not self.efa_launch_template_name:
            return default
        name, _ = group_launch_template(
            candidates,
            nodes=nodes,
            efa_wanted=efa_wanted,
            launch_template_name=default,
            efa_launch_template_name=self.efa_launch_template_name,
        )
        return name


NO_GROUP = GroupSite()


def launch_fleet(
    compute: Compute,
    *,
    candidates: Sequence[InstanceTypeInfo],
    subnets: Mapping[str, str],
    launch_template_name: str,
    placement_groups: Mapping[str, str] | None,
    lifecycle: Lifecycle,
    max_price_per_hour: float | None,
    avoid_pools: Collection[tuple[str, str]],
    nodes: int,
    tags: Mapping[str, str],
    failures: list[FleetLaunchError] | None = None,
) -> list[LaunchedInstance]:
    """Launch ``nodes`` instances in one request, all or nothing.

    EC2 launches several nodes all or nothing (``MinTargetCapacity``); an answer with fewer, from something
    less strict, is terminated and taken as no capacity.

    Returns
    -------
    list[LaunchedInstance]
        Exactly ``nodes`` instances.

    Raises
    ------
    CapacityUnavailable, CapacityQuotaExceeded, CapacityConfigurationError
        As :func:`spotrun.model.capacity.fleet_request.parse_fleet_response`.
    """
    request: dict[str, Any] = build_fleet_request(
        candidates=candidates,
        subnets=subnets,
        launch_template_name=launch_template_name,
        lifecycle=lifecycle,
        max_price_per_hour=max_price_per_hour,
        avoid_pools=avoid_pools,
        nodes=nodes,
        tags=tags,
        placement_groups=placement_groups,
    )
    response = compute.create_fleet(request)
    if failures is not None:
        failures.extend(fleet_errors(response, subnets))
    launched = parse_fleet_response(response, subnets)
    if len(launched) < nodes:
        compute.terminate([instance.instance_id for instance in launched])
        raise CapacityUnavailable(f"{len(launched)} of {nodes} nodes launched: a group needs them all")
    return launched

"""The EC2 CreateFleet API as spotrun uses it: the request over candidate pools, and what its response means.

Pure: this module builds the keyword arguments of ``ec2.create_fleet`` and reads its response, but never
calls AWS, so the acquire function, the emulator and the tests share one implementation.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spotrun.model.capacity.candidates import LIFECYCLES, Lifecycle, Pool
from spotrun.model.capacity.fleet_errors import (
    ErrorKind,
    classify,
    configuration_advice,
    overall_kind,
    quota_advice,
)
from spotrun.model.capacity.pricing import InstanceTypeInfo
from spotrun.model.errors import (
    CapacityConfigurationError,
    CapacityQuotaExceeded,
    CapacityUnavailable,
    ManifestInvalid,
)

# CreateFleet allows at most 300 overrides (capacity pools) per request for fleets of type request and
# maintain; for instant fleets the documented pool quota is unlimited. spotrun keeps to 300 anyway: the
# catalog times a region's zones stays below it, and a bounded request is valid for every fleet type.
MAX_OVERRIDES = 300

# EC2 rejects a MaxPrice of USD 0.001 or less with InvalidParameterValue.
MIN_SPOT_MAX_PRICE = 0.001


@dataclass(frozen=True, slots=True)
class LaunchedInstance:
    """One instance that CreateFleet launched."""

    instance_id: str
    instance_type: str
    availability_zone: str
    lifecycle: Lifecycle
    subnet_id: str | None = None

    @property
    def pool(self) -> Pool:
        """The pool the instance came from (to avoid it after a reclaim)."""
        return Pool(self.instance_type, self.availability_zone)


@dataclass(frozen=True, slots=True)
class FleetLaunchError:
    """One entry of CreateFleet's ``Errors``: a pool that could not supply an instance."""

    code: str
    message: str
    pool: Pool | None
    lifecycle: str | None

    @property
    def kind(self) -> ErrorKind:
        """capacity (may pass: wait), quota (raise it) or configuration (fix it):
        :mod:`~spotrun.model.capacity.fleet_errors`."""
        return classify(self.code)


def _one_subnet_per_zone(subnets: Mapping[str, str]) -> list[tuple[str, str]]:
    # A fleet request cannot span two subnets of the same zone; the lowest subnet id wins, deterministically.
    chosen: dict[str, str] = {}
    for subnet_id, zone in sorted(subnets.items()):
        chosen.setdefault(zone, subnet_id)
    return sorted((subnet_id, zone) for zone, subnet_id in chosen.items())


def _format_price(value: float) -> str:
    # MaxPrice is a string in the API; six decimals exceed any price's precision and avoid 1e-05 notation.
    return f"{value:.6f}".rstrip("0").rstrip(".")


def request_pools(
    candidates: Sequence[InstanceTypeInfo],
    subnets: Mapping[str, str],
    avoid_pools: Collection[tuple[str, str]] = (),
) -> list[tuple[InstanceTypeInfo, str, str]]:
    """The pools a fleet request offers EC2, in the request's order: ``(type, subnet id, zone)``.

    Every candidate type (cheapest first) in every zone (one subnet per zone, the lowest id), except the
    pools in ``avoid_pools``, unless that leaves none; at most :data:`MAX_OVERRIDES`. One home for the order:
    :func:`build_fleet_request` sends these as its overrides, and the plan (:mod:`spotrun.control.views.plan`)
    shows them.
    """
    zones = _one_subnet_per_zone(subnets)
    all_pools = [(info, subnet_id, zone) for info in candidates for subnet_id, zone in zones]
    avoided = {Pool(*pool) for pool in avoid_pools}
    pools = [item for item in all_pools if Pool(item[0].name, item[2]) not in avoided] or all_pools
    return pools[:MAX_OVERRIDES]


def build_fleet_request(
    *,
    candidates: Sequence[InstanceTypeInfo],
    subnets: Mapping[str, str],
    launch_template_name: str,
    lifecycle: Lifecycle,
    max_price_per_hour: float | None,
    avoid_pools: Collection[tuple[str, str]],
    nodes: int,
    tags: Mapping[str, str],
    placement_groups: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Build the keyword arguments of ``ec2.create_fleet`` for an instant fleet.

    Every (candidate type x zone) pair becomes one override, in candidate order (cheapest first), except the
    pools in ``avoid_pools``. If that would leave no pool at all, the avoid list is ignored: a recently
    reclaimed pool is better than no capacity, and the job must not starve because of it. At most
    :data:`MAX_OVERRIDES` overrides are sent, the cheapest ones.

    Spot requests use the ``price-capacity-optimized`` strategy; on-demand ones ``lowest-price``. With
    several nodes, all of them must land in one zone on one instance type, all or nothing
    (``SingleAvailabilityZone``, ``SingleInstanceType``, ``MinTargetCapacity``). A single node needs none of
    that, and ``MinTargetCapacity`` is only accepted together with one of the two ``Single*`` flags.

    Parameters
    ----------
    candidates
        Instance types, cheapest first (see :func:`candidate_types`).
    subnets
        Subnet id -> availability zone. Only one subnet per zone is used (the lowest id), because a fleet
        request may not span two subnets of one zone.
    launch_template_name
        The deployment's launch template; its ``$Latest`` version is used.
    lifecycle
        ``"spot"`` or ``"on-demand"``.
    max_price_per_hour
        Highest spot price per instance-hour, USD, or None for the current spot price (the recommended
        setting). Ignored for on-demand.
    avoid_pools
        Pools (instance type, zone) to leave out, e.g. from :func:`avoid_list`.
    nodes
        Number of instances.
    tags
        Tags for the instances and their volumes.
    placement_groups
        Subnet id -> the cluster placement group of that subnet's zone
        (:func:`~spotrun.model.capacity.group_launch.placement_groups`), or None for no placement group. When
        given, every override launches into its subnet's group (``Placement.GroupName``, which fleet overrides
        accept: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_FleetLaunchTemplateOverridesRequest.html),
        so a group's nodes share one zone's low-latency network.

    Returns
    -------
    dict[str, Any]
        ``ec2.create_fleet(**request)`` arguments.

    Raises
    ------
    ValueError
        For no candidates, no subnets, fewer than one node, an unknown lifecycle, or a subnet of the request
        without a placement group in ``placement_groups``.
    ManifestInvalid
        For a spot max price at or below EC2's minimum (USD 0.001).
    """
    if not candidates:
        raise ValueError("no candidate instance types")
    if not subnets:
        raise ValueError("no subnets: the deployment must give at least one subnet")
    if nodes < 1:
        raise ValueError(f"nodes must be at least 1, got {nodes}")
    if lifecycle not in LIFECYCLES:
        raise ValueError(f"lifecycle must be one of {LIFECYCLES}, got {lifecycle!r}")
    spot = lifecycle == "spot"
    max_price = max_price_per_hour if spot else None
    if max_price is not None and max_price <= MIN_SPOT_MAX_PRICE:
        raise ManifestInvalid(
            f"capacity.max_price_per_hour must be more than {MIN_SPOT_MAX_PRICE} USD (EC2's minimum), "
            f"got {max_price}"
        )

    pools = request_pools(candidates, subnets, avoid_pools)
    if placement_groups is not None:
        unplaced = sorted({subnet_id for _info, subnet_id, _zone in pools} - set(placement_groups))
        if unplaced:
            raise ValueError(f"no placement group for subnet {', '.join(unplaced)}")
    overrides: list[dict[str, Any]] = []
    for info, subnet_id, _zone in pools:
        override: dict[str, Any] = {"InstanceType": info.name, "SubnetId": subnet_id}
        if max_price is not None:
            override["MaxPrice"] = _format_price(max_price)
        if placement_groups is not None:
            override["Placement"] = {"GroupName": placement_groups[subnet_id]}
        overrides.append(override)

    target: dict[str, Any] = {"TotalTargetCapacity": nodes, "DefaultTargetCapacityType": lifecycle}
    # Only one of the two may be given: EC2 refuses a request that names both.
    target["SpotTargetCapacity" if spot else "OnDemandTargetCapacity"] = nodes

    options: dict[str, Any] = {"AllocationStrategy": "price-capacity-optimized" if spot else "lowest-price"}
    if nodes > 1:
        # Distributed training wants identical nodes close together, and a partial set of nodes is useless.
        options |= {"SingleAvailabilityZone": True, "SingleInstanceType": True, "MinTargetCapacity": nodes}

    tag_list = [{"Key": key, "Value": value} for key, value in tags.items()]
    request: dict[str, Any] = {
        "Type": "instant",
        "LaunchTemplateConfigs": [
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateName": launch_template_name,
                    "Version": "$Latest",
                },
                "Overrides": overrides,
            }
        ],
        "TargetCapacitySpecification": target,
        "SpotOptions" if spot else "OnDemandOptions": options,
    }
    if tag_list:
        # Nothing to tag: leave the key out rather than send empty tag lists.
        request["TagSpecifications"] = [
            {"ResourceType": "instance", "Tags": tag_list},
            {"ResourceType": "volume", "Tags": tag_list},
        ]
    return request


def _override_pool(
    item: Mapping[str, Any], subnets: Mapping[str, str]
) -> tuple[str | None, str | None, str | None]:
    """(instance type, zone, subnet id) of a response entry, from whichever fields AWS filled in."""
    overrides = (item.get("LaunchTemplateAndOverrides") or {}).get("Overrides") or {}
    instance_type = item.get("InstanceType") or overrides.get("InstanceType")
    subnet_id = item.get("SubnetId") or overrides.get("SubnetId")
    zone = (
        item.get("AvailabilityZone")
        or overrides.get("AvailabilityZone")
        or (subnets.get(subnet_id) if subnet_id else None)
    )
    return instance_type, zone, subnet_id


def fleet_errors(response: Mapping[str, Any], subnets: Mapping[str, str]) -> list[FleetLaunchError]:
    """Read the ``Errors`` of a CreateFleet response.

    Parameters
    ----------
    response
        What ``ec2.create_fleet`` returned.
    subnets
        Subnet id -> availability zone, to name the zone of an error that gives only its subnet.

    Returns
    -------
    list[FleetLaunchError]
        One per error, with its pool when the response names one.
    """
    errors = []
    for item in response.get("Errors") or []:
        instance_type, zone, _subnet = _override_pool(item, subnets)
        pool = Pool(instance_type, zone) if instance_type and zone else None
        errors.append(
            FleetLaunchError(
                code=item.get("ErrorCode") or "Unknown",
                message=item.get("ErrorMessage") or "",
                pool=pool,
                lifecycle=item.get("Lifecycle"),
            )
        )
    return errors


def _describe_errors(errors: Sequence[FleetLaunchError]) -> str:
    if not errors:
        return "EC2 returned no instance and no error"
    by_code: dict[str, list[FleetLaunchError]] = {}
    for error in errors:
        by_code.setdefault(error.code, []).append(error)
    parts = []
    for code, group in by_code.items():
        pools = sorted({str(error.pool) for error in group if error.pool})
        where = f" in {', '.join(pools)}" if pools else ""
        message = next((error.message for error in group if error.message), "")
        parts.append(f"{code}{where}" + (f" ({message})" if message else ""))
    return "; ".join(parts)


def parse_fleet_response(
    response: Mapping[str, Any],
    subnets: Mapping[str, str],
    *,
    requested_lifecycle: Lifecycle | None = None,
) -> list[LaunchedInstance]:
    """Read the instances an instant fleet launched.

    The zone comes from the response when AWS gives it, else from the subnet through ``subnets`` (the
    emulator, like older API versions, names only the subnet).

    Parameters
    ----------
    response
        What ``ec2.create_fleet`` returned.
    subnets
        Subnet id -> availability zone, as given to :func:`build_fleet_request`.
    requested_lifecycle
        Used for an instance whose entry lacks ``Lifecycle``.

    Returns
    -------
    list[LaunchedInstance]
        Every launched instance, at least one. Errors of other pools are ignored when something launched;
        with several nodes the request is all or nothing (``MinTargetCapacity``), so compare the count with
        the nodes asked for only when talking to something less strict than EC2.

    Raises
    ------
    CapacityUnavailable, CapacityQuotaExceeded, CapacityConfigurationError
        When nothing launched, by the kind of the errors (:func:`launch_failure`); the message lists the error
        codes and the pools they concern.
    ValueError
        When an instance's zone or lifecycle cannot be told (a ``subnets`` mapping that does not match the
        request).
    """
    launched: list[LaunchedInstance] = []
    for item in response.get("Instances") or []:
        instance_type, zone, subnet_id = _override_pool(item, subnets)
        ids = list(item.get("InstanceIds") or [])
        lifecycle = item.get("Lifecycle") or requested_lifecycle
        if not ids:
            continue
        if instance_type is None or zone is None:
            raise ValueError(
                f"cannot tell the instance type and zone of {', '.join(ids)} "
                f"(subnet {subnet_id!r} is not in the subnets given)"
            )
        if lifecycle not in LIFECYCLES:
            raise ValueError(f"unexpected lifecycle {lifecycle!r} for {', '.join(ids)}")
        for instance_id in ids:
            launched.append(
                LaunchedInstance(
                    instance_id=instance_id,
                    instance_type=instance_type,
                    availability_zone=zone,
                    lifecycle=lifecycle,
                    subnet_id=subnet_id,
                )
            )
    if not launched:
        raise launch_failure(fleet_errors(response, subnets))
    return launched


def launch_failure(
    errors: Sequence[FleetLaunchError],
) -> CapacityUnavailable | CapacityQuotaExceeded | CapacityConfigurationError:
    """The error to raise for a launch that gave no instance, by the kind of its pools' errors.

    Parameters
    ----------
    errors
        The response's errors (a refused call counts as one error without a pool).

    Returns
    -------
    CapacityUnavailable | CapacityQuotaExceeded | CapacityConfigurationError
        Capacity: the workflow waits and asks again. Quota: the message names the Service Quotas quota to
        raise. Configuration: the message names the code and what to change. Each lists every code and pool.
    """
    described = _describe_errors(errors)
    kind = overall_kind([error.code for error in errors])
    if kind == "capacity":
        return CapacityUnavailable(f"no instance launched: {described}")
    if kind == "quota":
        quota_errors = [error for error in errors if error.kind == "quota"]
        advice = quota_advice([(error.pool, error.lifecycle) for error in quota_errors])
        return CapacityQuotaExceeded(
            f"EC2 quota reached, waiting will not help: {described}. To fix: {advice}"
        )
    codes = dict.fromkeys(error.code for error in errors if error.kind == "configuration")
    advice = "; ".join(f"{code}: {configuration_advice(code)}" for code in codes)
    return CapacityConfigurationError(
        f"EC2 cannot launch this request as configured: {described}. To fix: {advice}"
    )

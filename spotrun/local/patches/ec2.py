"""EC2 with a capacity model: instant fleets choose pools, launches boot, terminations free slots.

moto's ``create_fleet`` always launches the first override and knows no price or capacity, and its spot price
history is a static fixture. The replacements here:

- ``FleetsBackend.create_fleet`` (instant fleets): expand the overrides (instance types, attribute-based
  ``InstanceRequirements``, subnets) into candidates, let :class:`~spotrun.local.capacity.pools.CapacityModel` plan,
  then have moto launch exactly the planned (type, subnet) pairs; shortfalls become the response's ``Errors``.
- ``InstanceBackend.run_instances``: refuse launches into a full pool (``InsufficientInstanceCapacity``) and
  hand every new instance to the :class:`~spotrun.local.instances.fleet.InstanceManager` (pending, then running).
- ``Instance.terminate``: tell the manager, which kills the instance's processes and frees its slot.
- ``DescribeSpotPriceHistory``: the pools' prices.
- Instant fleets that launch as a group (``SingleAvailabilityZone``, ``SingleInstanceType``, ``MinTargetCapacity``):
  :func:`~spotrun.local.capacity.groups.plan_group`, all of the minimum in one pool or nothing.
- Placement groups: an override (or the launch template) naming ``Placement.GroupName`` launches into that group,
  shown as the instance's ``Placement.GroupName``; a group that does not exist fails the override with
  ``InvalidPlacementGroup.Unknown`` in ``Errors`` (:mod:`spotrun.local.patches.ec2_placement`).
- Injected CreateFleet errors (:class:`~spotrun.local.capacity.injected_errors.InjectedFleetErrors`): a refused
  call raises, any other code fails every pool in ``Errors``.
- ``DescribeInstances`` / ``TerminateInstances``: ``InvalidInstanceID.NotFound`` for an instance not yet
  propagated (:class:`~spotrun.local.patches.ec2_consistency.Ec2Consistency`); such a terminate leaves it running.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from typing import Any, cast

from spotrun.local.capacity.catalog import types_matching
from spotrun.local.capacity.groups import GroupOptionsError, GroupRule, plan_group
from spotrun.local.capacity.injected_errors import CALL_LEVEL_ERRORS
from spotrun.local.capacity.pools import Candidate, CapacityModel, FleetPlan, Shortfall
from spotrun.local.instances.fleet import InstanceManager
from spotrun.local.patches.ec2_consistency import Ec2Consistency
from spotrun.local.patches.ec2_placement import UNKNOWN, PlacementGroups, unknown_message
from spotrun.local.patches.reversible import PatchSet
from spotrun.model.capacity.candidates import Lifecycle


def _template_data(backend: Any, spec: dict[str, Any]) -> dict[str, Any]:
    if "LaunchTemplateId" in spec:
        template = backend.get_launch_template(spec["LaunchTemplateId"])
    else:
        template = backend.get_launch_template_by_name(spec["LaunchTemplateName"])
    version = spec.get("Version") or template.default_version_number
    return dict(template.get_version(version).data)


def _placements(backend: Any, override: dict[str, Any], data: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(subnet id, zone) pairs an override may launch into."""
    subnet_id = override.get("SubnetId") or data.get("SubnetId")
    if not subnet_id:
        subnet_id = next((n["SubnetId"] for n in data.get("NetworkInterfaces", []) if "SubnetId" in n), None)
    if subnet_id:
        yield subnet_id, backend.get_subnet(subnet_id).availability_zone
        return
    # No subnet: AWS picks among the default subnets, of the requested zone if there is one.
    zone = override.get("AvailabilityZone") or data.get("Placement", {}).get("AvailabilityZone")
    for subnet_zone, subnet in sorted(backend.get_default_subnets().items()):
        if zone in (None, subnet_zone):
            yield subnet.id, subnet_zone


def expand_candidates(backend: Any, launch_template_configs: list[dict[str, Any]]) -> list[Candidate]:
    """Turn a CreateFleet request's launch template configs into concrete (type, subnet) candidates.

    Each candidate's ``context`` is ``(launch template specification, concrete override)``: the override with
    one instance type and one subnet, which moto can launch.
    """
    candidates: list[Candidate] = []
    for config in launch_template_configs:
        template_spec = config["LaunchTemplateSpecification"]
        data = _template_data(backend, template_spec)
        for override in config.get("Overrides") or [{}]:
            if override.get("InstanceType") or data.get("InstanceType"):
                types = [override.get("InstanceType") or data["InstanceType"]]
            else:
                types = types_matching(
                    override.get("InstanceRequirements") or data.get("InstanceRequirements", {})
                )
            max_price = override.get("MaxPrice") or (
                data.get("InstanceMarketOptions", {}).get("SpotOptions", {}).get("MaxPrice")
            )
            priority = override.get("Priority")
            for subnet_id, zone in _placements(backend, override, data):
                for instance_type in types:
                    concrete = {
                        k: v for k, v in override.items() if k not in ("InstanceRequirements", "Priority")
                    }
                    concrete.update(InstanceType=instance_type, SubnetId=subnet_id)
                    candidates.append(
                        Candidate(
                            order=len(candidates),
                            instance_type=instance_type,
                            availability_zone=zone,
                            subnet_id=subnet_id,
                            max_price=float(max_price) if max_price is not None else None,
                            priority=float(priority) if priority is not None else None,
                            context=(template_spec, concrete),
                        )
                    )
    return candidates


def _wanted(spec: dict[str, Any]) -> dict[Lifecycle, int]:
    total = int(spec.get("TotalTargetCapacity", 0))
    spot = int(spec.get("SpotTargetCapacity", 0))
    on_demand = int(spec.get("OnDemandTargetCapacity", 0))
    rest = max(0, total - spot - on_demand)
    if spec.get("DefaultTargetCapacityType", "on-demand") == "spot":
        spot += rest
    else:
        on_demand += rest
    return {"spot": spot, "on-demand": on_demand}


def _error(shortfall: Shortfall, lifecycle: Lifecycle) -> dict[str, Any]:
    template_spec, override = shortfall.candidate.context
    return {
        "LaunchTemplateAndOverrides": {"LaunchTemplateSpecification": template_spec, "Overrides": override},
        "Lifecycle": lifecycle,
        "ErrorCode": shortfall.code,
        "ErrorMessage": shortfall.message,
    }


def _group_name(backend: Any, candidate: Candidate) -> str:
    """The placement group a candidate launches into: its override's, else its launch template's ("": none)."""
    template_spec, override = candidate.context
    name = (override.get("Placement") or {}).get("GroupName")
    if name is None:
        name = (_template_data(backend, template_spec).get("Placement") or {}).get("GroupName")
    return str(name or "")


def _fleet_instances(fleet: Any) -> list[Any]:
    """moto's instance records of every instance the fleet launched so far, in launch order."""
    spot = [request.instance for request in fleet.spot_requests if getattr(request, "instance", None)]
    return spot + [entry["instance"] for entry in fleet.on_demand_instances]


def install(
    patches: PatchSet,
    capacity: CapacityModel,
    manager: InstanceManager,
    lock: threading.RLock,
    consistency: Ec2Consistency | None = None,
    placement_groups: PlacementGroups | None = None,
) -> None:
    """Install the EC2 replacements described in the module docstring."""
    from moto.ec2.exceptions import EC2ClientError, InvalidInstanceIdError
    from moto.ec2.models.fleets import FleetsBackend
    from moto.ec2.models.instances import Instance, InstanceBackend
    from moto.ec2.responses.fleets import Fleets
    from moto.ec2.responses.instances import InstanceResponse
    from moto.ec2.responses.spot_instances import SpotInstances

    original_create_fleet = FleetsBackend.create_fleet
    original_fleet_response = Fleets.create_fleet
    original_run_instances = InstanceBackend.run_instances
    original_terminate = Instance.terminate
    original_describe_response = InstanceResponse.describe_instances
    original_terminate_response = InstanceResponse.terminate_instances

    def create_fleet(self: Any, **kwargs: Any) -> Any:
        if kwargs.get("fleet_type") != "instant":
            return original_create_fleet(self, **kwargs)
        requested = kwargs["target_capacity_specification"]
        wanted = _wanted(requested)
        rules: dict[Lifecycle, GroupRule] = {}
        for lifecycle, count in wanted.items():
            options = kwargs.get("spot_options" if lifecycle == "spot" else "on_demand_options") or {}
            try:
                rules[lifecycle] = GroupRule.from_options(options, count, lifecycle)
            except GroupOptionsError as exc:
                raise EC2ClientError(exc.code, exc.message) from None
        injected = capacity.fleet_errors.take()
        if injected is not None and injected[0] in CALL_LEVEL_ERRORS:
            raise EC2ClientError(*injected)
        with lock:
            candidates = expand_candidates(self, kwargs["launch_template_configs"])
            groups = {c: _group_name(self, c) for c in candidates}
            # An override naming a placement group that does not exist launches nothing.
            unplaceable = [
                Shortfall(c, UNKNOWN, unknown_message(name))
                for c, name in groups.items()
                if name and (placement_groups is None or placement_groups.get(*_where(self), name) is None)
            ]
            placeable = [c for c in candidates if c not in {s.candidate for s in unplaceable}]
            plans: dict[Lifecycle, FleetPlan] = {}
            for lifecycle, count in wanted.items():
                options = kwargs.get("spot_options" if lifecycle == "spot" else "on_demand_options") or {}
                if count and injected is not None:
                    # Every pool refuses for the injected reason: nothing launches.
                    plans[lifecycle] = FleetPlan(shortfalls=[Shortfall(c, *injected) for c in candidates])
                elif count:
                    plan = plan_group(
                        capacity,
                        placeable,
                        lifecycle,
                        count,
                        options.get("AllocationStrategy"),
                        rules[lifecycle],
                    )
                    plan.shortfalls = unplaceable + plan.shortfalls
                    plans[lifecycle] = plan
            launches = [(c, n, lc) for lc, plan in plans.items() for c, n in plan.allocations]
            nothing = {
                **requested,
                "TotalTargetCapacity": 0,
                "SpotTargetCapacity": 0,
                "OnDemandTargetCapacity": 0,
            }
            fleet = original_create_fleet(
                self,
                **{
                    **kwargs,
                    # moto reads the spot allocation strategy without a default; EC2's is lowest-price
                    # (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_SpotOptionsRequest.html).
                    "spot_options": {
                        "AllocationStrategy": "lowest-price",
                        **(kwargs.get("spot_options") or {}),
                    },
                    "target_capacity_specification": nothing,
                    "launch_template_configs": [
                        {"LaunchTemplateSpecification": c.context[0], "Overrides": [c.context[1]]}
                        for c, _, _ in launches
                    ],
                },
            )
            specs = list(fleet.launch_specs)  # one per launch, in order
            for spec, (candidate, count, lifecycle) in zip(specs, launches, strict=True):
                fleet.launch_specs = [spec]  # moto launches from the first spec: give it only the planned one
                before = len(_fleet_instances(fleet))
                if lifecycle == "spot":
                    fleet.create_spot_requests(count)
                else:
                    fleet.create_on_demand_requests(count)
                # moto's fleets pass no placement to the launch: record the group on the instances themselves.
                for instance in _fleet_instances(fleet)[before:]:
                    instance.placement.group_name = groups[candidate]
            fleet.launch_specs = specs
            fleet.target_capacity_specification = requested
            fleet.launch_template_configs = kwargs["launch_template_configs"]
            fleet.target_capacity = int(requested.get("TotalTargetCapacity", 0))
            # Kept on the fleet for the response layer, which alone can add Errors to the reply.
            errors = [_error(s, lc) for lc, plan in plans.items() for s in plan.shortfalls]
            fleet.spotrun_errors = errors  # type: ignore[attr-defined]
        return fleet

    def create_fleet_response(self: Any) -> Any:
        result = original_fleet_response(self)
        body = cast(dict[str, Any], result.result)
        errors = getattr(self.ec2_backend.get_fleet(body["FleetId"]), "spotrun_errors", None)
        if errors:
            body["Errors"] = errors
            body.setdefault("Instances", [])
        return result

    def run_instances(
        self: Any, image_id: str, count: int, user_data: Any, security_group_names: Any, **kw: Any
    ) -> Any:
        with lock:
            instance_type, zone = _launch_target(self, kw)
            lifecycle: Lifecycle = (
                "spot" if kw.get("lifecycle") == "spot" or kw.get("instance_market_options") else "on-demand"
            )
            if (
                instance_type
                and zone
                and capacity.pool(instance_type, zone)
                and capacity.free(instance_type, zone, lifecycle) < count
            ):
                message = (
                    f"We currently do not have sufficient {instance_type} capacity in the Availability Zone "
                )
                raise EC2ClientError("InsufficientInstanceCapacity", message + f"you requested ({zone}).")
            reservation = original_run_instances(self, image_id, count, user_data, security_group_names, **kw)
            for instance in reservation.instances:
                if consistency is not None:
                    consistency.launched(instance.id)
                manager.launched(instance, "spot" if instance.lifecycle == "spot" else "on-demand")
        return reservation

    def describe_instances_response(self: Any) -> Any:
        hidden = consistency.hidden_from_describe(self._get_param("InstanceIds", [])) if consistency else []
        if hidden:
            raise InvalidInstanceIdError(hidden)
        return original_describe_response(self)

    def terminate_instances_response(self: Any) -> Any:
        hidden = consistency.hidden_from_terminate(self._get_param("InstanceIds", [])) if consistency else []
        if hidden:
            # The call fails as a whole and terminates nothing: the instance keeps running.
            raise InvalidInstanceIdError(hidden)
        return original_terminate_response(self)

    def terminate(self: Any) -> Any:
        already = self._state.name == "terminated"
        previous = original_terminate(self)
        if not already:
            manager.terminated(self)
        return previous

    patches.add(FleetsBackend, "create_fleet", create_fleet)
    patches.add(Fleets, "create_fleet", create_fleet_response)
    patches.add(InstanceBackend, "run_instances", run_instances)
    patches.add(Instance, "terminate", terminate)
    patches.add(InstanceResponse, "describe_instances", describe_instances_response)
    patches.add(InstanceResponse, "terminate_instances", terminate_instances_response)
    patches.add(SpotInstances, "describe_spot_price_history", _price_history_response(capacity))


def _where(backend: Any) -> tuple[str, str]:
    return backend.account_id, backend.region_name


def _launch_target(backend: Any, kwargs: dict[str, Any]) -> tuple[str | None, str | None]:
    """Best guess, before moto creates them, of the type and zone of the instances of a RunInstances call."""
    instance_type = None if kwargs.get("is_instance_type_default") else kwargs.get("instance_type")
    if instance_type is None and kwargs.get("launch_template"):
        instance_type = backend._get_template_from_args(kwargs["launch_template"]).data.get("InstanceType")
    if kwargs.get("subnet_id"):
        return instance_type, backend.get_subnet(kwargs["subnet_id"]).availability_zone
    return instance_type, kwargs.get("placement")


def _parse_time(value: Any) -> dt.datetime | None:
    if value in (None, ""):
        return None
    when = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def _price_history_response(capacity: CapacityModel) -> Any:
    from moto.core.responses import ActionResult

    def describe_spot_price_history(self: Any) -> Any:
        filters = self._filters_from_querystring()
        types = set(self._get_param("InstanceTypes", [])) | set(filters.get("instance-type", []))
        zones = set(filters.get("availability-zone", []))
        if self._get_param("AvailabilityZone"):
            zones.add(self._get_param("AvailabilityZone"))
        products = set(self._get_param("ProductDescriptions", [])) | set(
            filters.get("product-description", [])
        )
        records = capacity.price_history(
            types or None,
            zones or None,
            _parse_time(self._get_param("StartTime")),
            _parse_time(self._get_param("EndTime")),
        )
        linux = not products or any(p.startswith("Linux/UNIX") for p in products)
        history = [
            {
                "AvailabilityZone": zone,
                "InstanceType": itype,
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": f"{price:.6f}",
                "Timestamp": when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            }
            for itype, zone, when, price in (records if linux else [])
        ]
        return ActionResult({"SpotPriceHistory": history})

    return describe_spot_price_history


def terminate_instance(
    account_id: str, region: str, instance_id: str, reason_code: str, reason_message: str
) -> None:
    """Terminate ``instance_id`` in moto's EC2 with the state reason EC2 gives (chaos' silent kills and reclaims)."""
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.instances import StateReason

    backend = ec2_backends[account_id][region]
    backend.terminate_instances([instance_id])
    backend.get_instance(instance_id).state_reason = StateReason(reason_message, reason_code)

"""Instant fleets that launch as a group: one zone, one instance type, and a minimum below which nothing launches.

An instant fleet's ``SpotOptions`` and ``OnDemandOptions`` may say ``SingleAvailabilityZone`` ("the fleet launches
all Spot Instances into a single Availability Zone"), ``SingleInstanceType`` ("uses a single instance type to
launch all Spot Instances in the fleet") and ``MinTargetCapacity`` ("the minimum target capacity for Spot Instances
in the fleet. If this minimum capacity isn't reached, no instances are launched. [...] Supported only for fleets of
type instant. At least one of the following must be specified: SingleAvailabilityZone | SingleInstanceType"):
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_SpotOptionsRequest.html and
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_OnDemandOptionsRequest.html. A multi-node job asks for
N nodes with all three and ``MinTargetCapacity`` N: all N in one pool, or none.

:func:`plan_group` groups the candidates by zone and/or type, tries the groups in the allocation strategy's order
of their best pool, and takes the first that launches the whole target; failing that, the group that launches
most, if it reaches the minimum; failing that, nothing, every candidate's reason in the instant fleet's ``Errors``
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instant-fleet.html: "returns the instances that launched,
along with errors for those instances that could not be launched").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spotrun.local.capacity.pools import Candidate, CapacityModel, FleetPlan
from spotrun.model.capacity.candidates import Lifecycle


class GroupOptionsError(ValueError):
    """A fleet's options EC2 refuses as a whole: its code and message."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _flag(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


@dataclass(frozen=True)
class GroupRule:
    """How one lifecycle's instances of a fleet must launch together."""

    single_zone: bool = False
    single_type: bool = False
    min_target: int = 0

    @classmethod
    def from_options(cls, options: Mapping[str, Any], count: int, lifecycle: Lifecycle) -> GroupRule:
        """Read a fleet's ``SpotOptions`` or ``OnDemandOptions`` for ``count`` instances of ``lifecycle``.

        Raises
        ------
        GroupOptionsError
            ``InvalidParameterValue`` when ``MinTargetCapacity`` comes without ``SingleAvailabilityZone`` or
            ``SingleInstanceType`` (the API reference requires one; the code is the one EC2 uses for a parameter's
            value it refuses), or exceeds the lifecycle's target capacity.
        """
        rule = cls(
            single_zone=_flag(options.get("SingleAvailabilityZone")),
            single_type=_flag(options.get("SingleInstanceType")),
            min_target=int(options.get("MinTargetCapacity") or 0),
        )
        what = "Spot" if lifecycle == "spot" else "On-Demand"
        if rule.min_target and not (rule.single_zone or rule.single_type):
            raise GroupOptionsError(
                "InvalidParameterValue",
                f"MinTargetCapacity for {what} Instances requires SingleAvailabilityZone or SingleInstanceType.",
            )
        if rule.min_target > count:
            raise GroupOptionsError(
                "InvalidParameterValue",
                f"MinTargetCapacity ({rule.min_target}) for {what} Instances cannot exceed their target capacity "
                f"({count}).",
            )
        return rule

    def key(self, candidate: Candidate) -> tuple[str, ...]:
        """The group ``candidate`` belongs to: its zone, its type, both, or one group for all."""
        return (
            *((candidate.availability_zone,) if self.single_zone else ()),
            *((candidate.instance_type,) if self.single_type else ()),
        )


def plan_group(
    model: CapacityModel,
    candidates: Sequence[Candidate],
    lifecycle: Lifecycle,
    count: int,
    strategy: str | None,
    rule: GroupRule,
) -> FleetPlan:
    """Choose pools for ``count`` instances under ``rule`` (see the module docstring).

    Returns
    -------
    FleetPlan
        Allocations inside one group (or across the request when the rule groups nothing), and the shortfalls;
        no allocation at all when fewer than ``rule.min_target`` instances could launch.
    """
    if not (rule.single_zone or rule.single_type):
        return _at_least(model.plan(candidates, lifecycle, count, strategy), rule.min_target, [])
    # Ranked among the pools the model has; a candidate naming a pool it lacks can launch nothing (plan() says
    # so in its shortfalls), so its group comes last.
    offered = [c for c in candidates if model.pool(c.instance_type, c.availability_zone) is not None]
    ordered = model.preferred(offered, lifecycle, strategy) + [c for c in candidates if c not in offered]
    groups: dict[tuple[str, ...], list[Candidate]] = {}
    for cand in ordered:
        groups.setdefault(rule.key(cand), []).append(cand)  # first seen: the group of the best pool first
    best: FleetPlan | None = None
    tried: list[FleetPlan] = []
    for members in groups.values():
        plan = model.plan(sorted(members, key=lambda c: c.order), lifecycle, count, strategy)
        if plan.launched >= count:
            return plan
        tried.append(plan)
        if best is None or plan.launched > best.launched:
            best = plan
    if best is None:
        return FleetPlan()
    return _at_least(best, rule.min_target, tried)


def _at_least(plan: FleetPlan, minimum: int, tried: list[FleetPlan]) -> FleetPlan:
    """``plan`` when it launches at least ``minimum`` instances (and at least one); otherwise nothing launches."""
    if plan.launched >= max(minimum, 1):
        return plan
    shortfalls = [s for other in tried for s in other.shortfalls] or plan.shortfalls
    return FleetPlan(allocations=[], shortfalls=shortfalls)

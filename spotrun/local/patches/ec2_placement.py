"""EC2 placement groups, which moto 5.2.5 does not implement: Create, Describe and DeletePlacementGroup.

A multi-node job's nodes launch into one cluster placement group (CreateFleet overrides carrying
``Placement.GroupName``); the fleet patch (:mod:`spotrun.local.patches.ec2`) asks :class:`PlacementGroups` whether
the group exists and records it on each instance it launches there (DescribeInstances' ``Placement.GroupName``).

The answers follow the API reference
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreatePlacementGroup.html,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribePlacementGroups.html,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DeletePlacementGroup.html) and its error codes
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html): ``InvalidPlacementGroup.Duplicate``
for a name taken, ``InvalidPlacementGroup.Unknown`` for a name that does not exist, ``InvalidPlacementGroup.InUse``
for deleting a group that still holds instances. A partition group has 1 to 7 partitions
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from spotrun.local.patches.reversible import PatchSet

STRATEGIES = ("cluster", "spread", "partition")
UNKNOWN = "InvalidPlacementGroup.Unknown"
DUPLICATE = "InvalidPlacementGroup.Duplicate"
IN_USE = "InvalidPlacementGroup.InUse"
MAX_PARTITIONS = 7


class PlacementGroupError(Exception):
    """An EC2 error code and message about a placement group."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def unknown_message(name: str) -> str:
    """EC2's message for a placement group name that does not exist."""
    return f"The Placement Group '{name}' is unknown."


@dataclass(frozen=True)
class PlacementGroup:
    """One placement group of one account and region."""

    name: str
    strategy: str
    group_id: str
    arn: str
    partition_count: int | None = None
    spread_level: str | None = None
    tags: tuple[tuple[str, str], ...] = field(default=())

    def describe(self) -> dict[str, Any]:
        """The group as DescribePlacementGroups lists it."""
        described: dict[str, Any] = {
            "GroupName": self.name,
            "State": "available",
            "Strategy": self.strategy,
            "GroupId": self.group_id,
            "GroupArn": self.arn,
            "Tags": [{"Key": k, "Value": v} for k, v in self.tags],
        }
        if self.partition_count is not None:
            described["PartitionCount"] = self.partition_count
        if self.spread_level is not None:
            described["SpreadLevel"] = self.spread_level
        return described


# (account id, region) -> names of the placement groups that live instances were launched into
InstancesInGroups = Callable[[str, str], Iterable[str]]


class PlacementGroups:
    """The placement groups of every account and region of one runtime (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[tuple[str, str], dict[str, PlacementGroup]] = {}

    def create(
        self,
        account_id: str,
        region: str,
        name: str,
        strategy: str,
        partition_count: int | None = None,
        spread_level: str | None = None,
        tags: Iterable[tuple[str, str]] = (),
    ) -> PlacementGroup:
        """Create a group.

        Raises
        ------
        PlacementGroupError
            ``InvalidPlacementGroup.Duplicate`` for a name taken, ``InvalidParameterValue`` for a bad strategy or
            partition count.
        """
        if strategy not in STRATEGIES:
            raise PlacementGroupError(
                "InvalidParameterValue", f"Value ({strategy}) for parameter strategy is invalid."
            )
        if partition_count is not None and (
            strategy != "partition" or not 1 <= partition_count <= MAX_PARTITIONS
        ):
            raise PlacementGroupError(
                "InvalidParameterValue",
                f"PartitionCount must be between 1 and {MAX_PARTITIONS}, for a partition placement group only.",
            )
        group_id = "pg-" + secrets.token_hex(9)[:17]
        group = PlacementGroup(
            name=name,
            strategy=strategy,
            group_id=group_id,
            arn=f"arn:aws:ec2:{region}:{account_id}:placement-group/{name}",
            partition_count=partition_count,
            spread_level=spread_level if strategy == "spread" else None,
            tags=tuple(tags),
        )
        with self._lock:
            groups = self._groups.setdefault((account_id, region), {})
            if name in groups:
                raise PlacementGroupError(DUPLICATE, f"The Placement Group '{name}' already exists.")
            groups[name] = group
        return group

    def get(self, account_id: str, region: str, name: str) -> PlacementGroup | None:
        """The group ``name``, or None when it does not exist."""
        with self._lock:
            return self._groups.get((account_id, region), {}).get(name)

    def describe(
        self, account_id: str, region: str, names: Iterable[str] = (), group_ids: Iterable[str] = ()
    ) -> list[PlacementGroup]:
        """The groups named (every group when no name or id is given).

        Raises
        ------
        PlacementGroupError
            ``InvalidPlacementGroup.Unknown`` for a name or id that does not exist.
        """
        names, group_ids = list(names), list(group_ids)
        with self._lock:
            groups = list(self._groups.get((account_id, region), {}).values())
        if not names and not group_ids:
            return groups
        by_name = {g.name: g for g in groups}
        by_id = {g.group_id: g for g in groups}
        found: list[PlacementGroup] = []
        for name in names:
            if name not in by_name:
                raise PlacementGroupError(UNKNOWN, unknown_message(name))
            found.append(by_name[name])
        for group_id in group_ids:
            if group_id not in by_id:
                raise PlacementGroupError(UNKNOWN, f"The Placement Group '{group_id}' is unknown.")
            found.append(by_id[group_id])
        return found

    def delete(self, account_id: str, region: str, name: str, in_use: Iterable[str]) -> None:
        """Delete the group ``name``; ``in_use`` names the groups live instances are in.

        Raises
        ------
        PlacementGroupError
            ``InvalidPlacementGroup.Unknown`` or ``InvalidPlacementGroup.InUse``.
        """
        with self._lock:
            groups = self._groups.get((account_id, region), {})
            if name not in groups:
                raise PlacementGroupError(UNKNOWN, unknown_message(name))
            if name in set(in_use):
                raise PlacementGroupError(
                    IN_USE, f"The placement group '{name}' is in use and may not be deleted."
                )
            del groups[name]


def groups_in_use(backend: Any) -> set[str]:
    """Names of the placement groups that instances of ``backend`` (moto's EC2 backend) not terminated are in."""
    names: set[str] = set()
    for instance in backend.all_instances():
        if instance.state != "terminated" and instance.placement.group_name:
            names.add(instance.placement.group_name)
    return names


def install(patches: PatchSet, groups: PlacementGroups) -> None:
    """Add CreatePlacementGroup, DescribePlacementGroups and DeletePlacementGroup to moto's EC2."""
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses import EC2Response

    def where(response: Any) -> tuple[str, str]:
        return response.current_account, response.region

    def create_placement_group(self: Any) -> Any:
        tags = self._parse_tag_specification("placement-group").get("placement-group", {})
        self.error_on_dryrun()
        count = self._get_param("PartitionCount")
        try:
            group = groups.create(
                *where(self),
                self._get_param("GroupName") or "",
                self._get_param("Strategy") or "",
                int(count) if count is not None else None,
                self._get_param("SpreadLevel"),
                tags.items(),
            )
        except PlacementGroupError as exc:
            raise EC2ClientError(exc.code, exc.message) from None
        return ActionResult({"PlacementGroup": group.describe()})

    def describe_placement_groups(self: Any) -> Any:
        try:
            found = groups.describe(
                *where(self), self._get_param("GroupNames", []) or [], self._get_param("GroupIds", []) or []
            )
        except PlacementGroupError as exc:
            raise EC2ClientError(exc.code, exc.message) from None
        filters = self._filters_from_querystring()
        wanted = {
            "group-name": lambda g: g.name,
            "strategy": lambda g: g.strategy,
            "state": lambda g: "available",
            "group-arn": lambda g: g.arn,
        }
        for key, values in filters.items():
            if key in wanted:
                found = [g for g in found if wanted[key](g) in values]
        return ActionResult({"PlacementGroups": [g.describe() for g in found]})

    def delete_placement_group(self: Any) -> Any:
        self.error_on_dryrun()
        try:
            groups.delete(*where(self), self._get_param("GroupName") or "", groups_in_use(self.ec2_backend))
        except PlacementGroupError as exc:
            raise EC2ClientError(exc.code, exc.message) from None
        return ActionResult({})

    patches.add(EC2Response, "create_placement_group", create_placement_group)
    patches.add(EC2Response, "describe_placement_groups", describe_placement_groups)
    patches.add(EC2Response, "delete_placement_group", delete_placement_group)

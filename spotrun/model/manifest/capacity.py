"""The manifest's resources and capacity: what one node needs, and how its capacity is bought.

:class:`Resources` and :class:`CapacityPolicy`, the ``resources`` and ``capacity`` of a
:class:`~spotrun.model.manifest.schema.JobManifest`, with the rules only they use.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import AfterValidator, ConfigDict, Field, StrictBool, field_validator, model_validator

from spotrun.model.manifest.deadline import DEADLINE_DESCRIPTION, DEADLINE_PATTERN, check_deadline
from spotrun.model.manifest.rules import AS_WRITTEN, INSTANCE_TYPE, GpuName, InstanceType, StrictModel

__all__ = ["DEFAULT_REPLACE_NODE_MINUTES", "MAX_NODES", "CapacityPolicy", "Resources"]

# Nodes a job may ask for: every node lands in one zone and one cluster placement group, launched all or nothing
# by one CreateFleet request (spotrun.model.capacity.fleet_request), so a group larger than a pool is rarely had.
MAX_NODES: Final = 16
# How long a multi-node job waits by default for the replacement of a lost node in its zone before the whole
# group moves to another zone.
DEFAULT_REPLACE_NODE_MINUTES: Final = 10


class Resources(StrictModel):
    """What one node of the job needs."""

    # Both lists given is refused by _types_or_names (with its message); `not` states it in the schema.
    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "required": ["instance_types", "gpu_names"],
                "properties": {"instance_types": {"type": "array"}, "gpu_names": {"type": "array"}},
            }
        }
    )

    gpus_per_node: int = Field(1, ge=1, le=16, description="GPUs on each node.")
    gpu_memory_gib: int | None = Field(
        None, ge=1, le=1024, description="Minimum memory of each GPU, GiB. Types with less are not used."
    )
    gpu_names: list[GpuName] | None = Field(
        None,
        min_length=1,
        description="Acceptable GPU models; spotrun picks the instance types that carry them.",
    )
    instance_types: list[InstanceType] | None = Field(
        None, min_length=1, description="An explicit list of instance types, instead of gpu_names."
    )
    nodes: int = Field(
        1,
        ge=1,
        le=MAX_NODES,
        description="Number of nodes. Several nodes run in one zone and one cluster placement group, all of one "
        "instance type, launched all or nothing; torchrun joins them (the command must be torchrun). A node "
        "reclaimed is replaced alone while the others wait (docs/guides/multi-node.md).",
    )
    efa: StrictBool = Field(
        True,
        description="Multi-node jobs: give every node an Elastic Fabric Adapter when the instance type offers "
        "one (and NCCL the libfabric environment for it); false: plain ENA networking. Only with nodes > 1.",
    )

    @field_validator("instance_types")
    @classmethod
    def _types_look_like_ec2(cls, value: list[str] | None) -> list[str] | None:
        for name in value or []:
            if not re.fullmatch(INSTANCE_TYPE, name):
                raise ValueError(f"{name!r} is not an EC2 instance type like g5.xlarge")
        return value

    @model_validator(mode="after")
    def _types_or_names(self) -> Resources:
        if self.instance_types and self.gpu_names:
            raise ValueError("give either instance_types or gpu_names, not both")
        return self


_FALLBACK_AFTER_DEFAULT: Final = 3

# The default, and the bounds of capacity.max_wait_minutes. The default is the patience spotrun always had (an
# hour). The maximum keeps the workflow inside Step Functions' 25,000 events per execution history
# (https://docs.aws.amazon.com/step-functions/latest/dg/service-quotas.html): each retry, a minute apart, adds
# about seven events (the failed task and the wait), so a day of waiting uses some 10,000 and leaves the rest
# for the job's attempts.
DEFAULT_MAX_WAIT_MINUTES: Final = 60
MAX_WAIT_MINUTES_LIMIT: Final = 1440


class CapacityPolicy(StrictModel):
    """How capacity is bought, and how much disruption the job accepts."""

    # spot: false with on_demand_fallback: true is refused by _fallback_needs_spot, a deadline beside the rules it
    # replaces by _deadline_replaces_fallback; each `not` states one of them in the schema.
    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {
                    "not": {
                        "required": ["spot", "on_demand_fallback"],
                        "properties": {"spot": {"const": False}, "on_demand_fallback": {"const": True}},
                    }
                },
                {
                    "not": {
                        "required": ["deadline", "spot"],
                        "properties": {"deadline": {"type": "string"}, "spot": {"const": False}},
                    }
                },
                {
                    "not": {
                        "required": ["deadline", "on_demand_fallback"],
                        "properties": {"deadline": {"type": "string"}, "on_demand_fallback": {"const": True}},
                    }
                },
                {
                    "not": {
                        "required": ["deadline", "max_wait_minutes"],
                        "properties": {
                            "deadline": {"type": "string"},
                            "max_wait_minutes": {"type": "integer"},
                        },
                    }
                },
                {
                    "not": {
                        "required": ["deadline", "fallback_after_interruptions"],
                        "properties": {
                            "deadline": {"type": "string"},
                            "fallback_after_interruptions": {"not": {"const": _FALLBACK_AFTER_DEFAULT}},
                        },
                    }
                },
            ]
        }
    )

    spot: StrictBool = Field(True, description="Use spot capacity. false runs on on-demand from the start.")
    max_price_per_hour: float | None = Field(
        None, gt=0.001, description="Highest spot price per instance-hour, USD; pools above it are not used."
    )
    on_demand_fallback: StrictBool = Field(
        False,
        description="Fall back to on-demand when spot is unavailable or after fallback_after_interruptions.",
    )
    fallback_after_interruptions: int = Field(
        _FALLBACK_AFTER_DEFAULT,
        ge=0,
        description="With on_demand_fallback, interruptions after which the job moves to on-demand.",
    )
    max_interruptions: int = Field(
        10, ge=0, le=1000, description="Interruptions tolerated before the job fails."
    )
    replace_node_minutes: int = Field(
        DEFAULT_REPLACE_NODE_MINUTES,
        ge=1,
        le=240,
        description="Multi-node jobs: how long a group that lost a node waits for its replacement in the same "
        "zone and placement group (the healthy nodes keep running, billed); past it the whole group moves to "
        "another zone. Only with resources.nodes > 1.",
    )
    avoid_pool_minutes: int = Field(
        30, ge=0, le=1440, description="How long a just-reclaimed pool (type, zone) is avoided."
    )
    deadline: Annotated[str, AS_WRITTEN, AfterValidator(check_deadline)] | None = Field(
        None, json_schema_extra={"pattern": DEADLINE_PATTERN}, description=DEADLINE_DESCRIPTION
    )
    # Like SageMaker's MaxWaitTimeInSeconds (spotrun.model.capacity.wait says how it differs); None is the default.
    max_wait_minutes: int | None = Field(
        None,
        ge=1,
        le=MAX_WAIT_MINUTES_LIMIT,
        description=f"How long the job may wait for capacity, in minutes, summed over all its waits (the first "
        f"launch and each one after an interruption); past it the job fails Capacity.MaxWaitExceeded with each "
        f"pool's last error. Default {DEFAULT_MAX_WAIT_MINUTES}. With on_demand_fallback, a wait happens only "
        f"when on-demand has no capacity either. Not with deadline, whose policy decides how long to wait.",
    )

    @property
    def max_wait_seconds(self) -> float:
        """``max_wait_minutes`` (or its default) in seconds, unscaled."""
        minutes = DEFAULT_MAX_WAIT_MINUTES if self.max_wait_minutes is None else self.max_wait_minutes
        return minutes * 60.0

    @model_validator(mode="after")
    def _fallback_needs_spot(self) -> CapacityPolicy:
        if not self.spot and self.on_demand_fallback:
            raise ValueError(
                "on_demand_fallback needs spot: true (an on-demand job has nothing to fall back from)"
            )
        return self

    @model_validator(mode="after")
    def _deadline_replaces_fallback(self) -> CapacityPolicy:
        # The deadline policy is itself the choice between spot and on-demand: a second rule beside it would
        # either contradict it or be ignored.
        if self.deadline is None:
            return self
        if not self.spot:
            raise ValueError(
                "deadline needs spot: true (an on-demand job has no choice for the deadline to make)"
            )
        if self.on_demand_fallback:
            raise ValueError(
                "deadline and on_demand_fallback exclude each other: the deadline decides when to use on-demand"
            )
        if self.max_wait_minutes is not None:
            raise ValueError(
                "deadline and max_wait_minutes exclude each other: the deadline decides how long to wait for spot "
                "(it moves to on-demand in time)"
            )
        # Compared with the default, not looked up in model_fields_set: a stored manifest is read back with
        # every default written out.
        if self.fallback_after_interruptions != _FALLBACK_AFTER_DEFAULT:
            raise ValueError(
                "deadline and fallback_after_interruptions (other than its default) exclude each other: the "
                "deadline decides when to move to on-demand"
            )
        return self

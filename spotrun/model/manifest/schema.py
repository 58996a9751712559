"""The job manifest: the public contract between a user and spotrun.

A manifest is YAML or JSON. It is validated strictly: unknown fields are errors (a typo must not be silently
ignored) and every error message names the field it is about. The JSON Schema printed by ``spotrun schema`` is
generated from these models, so the documentation cannot drift from the validation.

This module holds :class:`JobManifest` and its smaller parts (data, outputs, archive, budget, schedule);
``resources`` and ``capacity`` are in :mod:`spotrun.model.manifest.capacity`, ``training`` in
:mod:`spotrun.model.manifest.training`.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Annotated, Final, Literal

from pydantic import ConfigDict, Field, StrictBool, field_validator, model_validator
from pydantic.json_schema import JsonDict

from spotrun.model.manifest.capacity import DEFAULT_REPLACE_NODE_MINUTES, CapacityPolicy, Resources
from spotrun.model.manifest.deadline import is_absolute
from spotrun.model.manifest.rules import (
    AS_WRITTEN,
    CRON,
    MAX_TAG_VALUE,
    MAX_TAGS,
    NAME,
    RATE,
    RESERVED_TAG_KEY,
    SCHEDULE,
    TAG_KEY,
    GpuName,
    RelativePath,
    S3Uri,
    StrictModel,
    split_s3_uri,
)
from spotrun.model.manifest.training import (
    DEFAULT_GROUP_HANG_MINUTES,
    TrainingSpec,
    group_options_in,
    is_torchrun,
)

__all__ = ["MANIFEST_VERSION", "GpuName", "JobManifest", "split_s3_uri"]

MANIFEST_VERSION: Final = "spotrun/v1"


class DataInput(StrictModel):
    """One S3 object or prefix copied onto the instance's NVMe before training."""

    source: S3Uri = Field(description="s3://bucket/prefix/ (a prefix ends with /) or s3://bucket/key.")
    destination: RelativePath = Field(description="Path under $SPOTRUN_DATA_DIR, relative.")


class DataSpec(StrictModel):
    """The training data."""

    inputs: list[DataInput] = Field(default_factory=list, description="Inputs staged to NVMe, in parallel.")

    @field_validator("inputs")
    @classmethod
    def _destinations_do_not_overlap(cls, inputs: list[DataInput]) -> list[DataInput]:
        paths = [PurePosixPath(item.destination) for item in inputs]
        for index, path in enumerate(paths):
            for other in paths[index + 1 :]:
                if path == other or path in other.parents or other in path.parents:
                    raise ValueError(f"destinations {str(path)!r} and {str(other)!r} overlap")
        return inputs


class StorageClass(StrEnum):
    """Glacier storage classes an archived model may go to."""

    GLACIER = "GLACIER"
    DEEP_ARCHIVE = "DEEP_ARCHIVE"
    GLACIER_IR = "GLACIER_IR"


class OutputSpec(StrictModel):
    """What the job produces."""

    model: RelativePath = Field(
        "model", description="The model, a file or directory under $SPOTRUN_OUTPUT_DIR."
    )


class ArchiveSpec(StrictModel):
    """Where the finished model is archived."""

    storage_class: StorageClass = Field(
        StorageClass.GLACIER, description="GLACIER, DEEP_ARCHIVE or GLACIER_IR."
    )
    destination: S3Uri | None = Field(
        None, description="s3://bucket/prefix/ for the archive; default: the deployment's archive bucket."
    )


class Budget(StrictModel):
    """Spending limits."""

    max_usd: float | None = Field(
        None,
        gt=0,
        description="The job stops when its cost would pass this, USD: its instances' cost over all attempts, at "
        "the price paid, billed per second with EC2's 60 s minimum. Before the limit it checkpoints, releases its "
        "instances and ends with Budget.Exceeded; refused at submission if it cannot pay one boot.",
    )


class Schedule(StrictModel):
    """Recurring runs (retraining)."""

    expression: Annotated[str, AS_WRITTEN] = Field(
        json_schema_extra={"pattern": SCHEDULE},
        description="An EventBridge Scheduler expression: cron(...) with 6 fields, or rate(...).",
    )
    # Which zones exist depends on the tz database of the machine (and of Scheduler): no enum here, it is
    # checked when the schedule is created.
    timezone: str = Field("UTC", description="IANA time zone for cron expressions.")
    only_if_data_changed: StrictBool = Field(
        False, description="Skip a run when no input changed since the last success."
    )

    @field_validator("expression")
    @classmethod
    def _scheduler_syntax(cls, value: str) -> str:
        rate = re.fullmatch(RATE, value)
        if rate:
            singular = rate["value"] == "1"
            if singular != (not rate["unit"].endswith("s")):
                raise ValueError(
                    f"{value!r}: use a singular unit for 1 and a plural one otherwise, e.g. rate(1 day)"
                )
            return value
        if not re.fullmatch(CRON, value):
            raise ValueError(
                f"{value!r} is not a schedule expression: use cron(min hour day month weekday year) or rate(N unit)"
            )
        return value


# capacity.deadline comes with exactly one of training.expected_hours / training.total_steps, and neither comes
# without it (_deadline_has_work); these state it in the schema. (null is no value: `type` makes the if/then say so.)
_HAS_DEADLINE: JsonDict = {"required": ["deadline"], "properties": {"deadline": {"type": "string"}}}
_HAS_HOURS: JsonDict = {"required": ["expected_hours"], "properties": {"expected_hours": {"type": "number"}}}
_HAS_STEPS: JsonDict = {"required": ["total_steps"], "properties": {"total_steps": {"type": "integer"}}}
_DEADLINE_NEEDS_WORK: JsonDict = {
    "if": {"required": ["capacity"], "properties": {"capacity": _HAS_DEADLINE}},
    "then": {"required": ["training"], "properties": {"training": {"oneOf": [_HAS_HOURS, _HAS_STEPS]}}},
}
_WORK_NEEDS_DEADLINE: JsonDict = {
    "if": {"required": ["training"], "properties": {"training": {"anyOf": [_HAS_HOURS, _HAS_STEPS]}}},
    "then": {"required": ["capacity"], "properties": {"capacity": _HAS_DEADLINE}},
}
# And an absolute deadline (the instant pattern: it starts with four digits and a '-') never on a schedule.
_NO_INSTANT_ON_A_SCHEDULE: JsonDict = {
    "not": {
        "required": ["schedule", "capacity"],
        "properties": {
            "schedule": {"type": "object"},
            "capacity": {
                "required": ["deadline"],
                "properties": {"deadline": {"type": "string", "pattern": "^[0-9]{4}-"}},
            },
        },
    }
}


# A group's options need several nodes, and a deadline needs one (_group_options); these state it in the schema.
_SEVERAL_NODES: JsonDict = {
    "required": ["resources"],
    "properties": {
        "resources": {"required": ["nodes"], "properties": {"nodes": {"type": "integer", "minimum": 2}}}
    },
}
_GROUP_OPTIONS_NEED_NODES: JsonDict = {
    "if": {"not": _SEVERAL_NODES},
    "then": {
        "properties": {
            "resources": {"properties": {"efa": {"const": True}}},
            "capacity": {"properties": {"replace_node_minutes": {"const": DEFAULT_REPLACE_NODE_MINUTES}}},
        }
    },
}
_NO_DEADLINE_FOR_A_GROUP: JsonDict = {
    "not": {"allOf": [_SEVERAL_NODES, {"required": ["capacity"], "properties": {"capacity": _HAS_DEADLINE}}]}
}


class JobManifest(StrictModel):
    """A training job: what to run, on what, with which data, and where its model goes."""

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                _DEADLINE_NEEDS_WORK,
                _WORK_NEEDS_DEADLINE,
                _NO_INSTANT_ON_A_SCHEDULE,
                _GROUP_OPTIONS_NEED_NODES,
                _NO_DEADLINE_FOR_A_GROUP,
            ]
        }
    )

    version: Literal["spotrun/v1"] = Field(MANIFEST_VERSION, description="Manifest format version.")
    name: Annotated[str, AS_WRITTEN] = Field(
        json_schema_extra={"pattern": NAME},
        description="Lower-case letters, digits and '-', at most 48 characters.",
    )
    resources: Resources = Field(default_factory=lambda: Resources())
    capacity: CapacityPolicy = Field(default_factory=lambda: CapacityPolicy())
    data: DataSpec = Field(default_factory=lambda: DataSpec())
    training: TrainingSpec
    outputs: OutputSpec = Field(default_factory=lambda: OutputSpec())
    archive: ArchiveSpec = Field(default_factory=lambda: ArchiveSpec())
    budget: Budget = Field(default_factory=lambda: Budget())
    schedule: Schedule | None = None
    tags: dict[Annotated[str, AS_WRITTEN], str] = Field(
        default_factory=dict,
        json_schema_extra={
            "maxProperties": MAX_TAGS,
            "propertyNames": {"pattern": TAG_KEY, "not": {"pattern": RESERVED_TAG_KEY}},
            "additionalProperties": {"type": "string", "maxLength": MAX_TAG_VALUE},
        },
        description="Tags put on every instance of the job: at most 40; keys of letters, digits, spaces and "
        "_.:/=+-@, 1-128 characters, not starting with aws: or spotrun:; values at most 256 characters.",
    )

    @property
    def hang_seconds(self) -> float | None:
        """How long steps may stop advancing before the attempt is hung (None: never), unscaled.

        ``training.hang_minutes``, or its default: 30 minutes for a multi-node job, none for one node.
        """
        minutes = self.training.hang_minutes
        if minutes is None and self.resources.nodes > 1:
            minutes = DEFAULT_GROUP_HANG_MINUTES
        return None if minutes is None else minutes * 60.0

    @model_validator(mode="after")
    def _deadline_has_work(self) -> JobManifest:
        hours, steps = self.training.expected_hours, self.training.total_steps
        if self.capacity.deadline is not None and hours is None and steps is None:
            raise ValueError(
                "capacity.deadline needs the work to fit before it: training.expected_hours, or "
                "training.total_steps (its hours learnt from the job's progress)"
            )
        if hours is not None and steps is not None:
            raise ValueError(
                "training.expected_hours and training.total_steps exclude each other: give the work once, in "
                "hours or in steps"
            )
        for name, value in (("expected_hours", hours), ("total_steps", steps)):
            if self.capacity.deadline is None and value is not None:
                raise ValueError(f"training.{name} is only used with capacity.deadline; give both or neither")
        if self.schedule is not None and self.capacity.deadline and is_absolute(self.capacity.deadline):
            raise ValueError(
                "capacity.deadline: an absolute time on a schedule would be every run's deadline; use a "
                "duration after submission such as '36h'"
            )
        return self

    @model_validator(mode="after")
    def _group_options(self) -> JobManifest:
        # The options of a multi-node job are refused on one node, where they would be accepted and ignored;
        # compared with their defaults, since a stored manifest is read back with every default written out.
        if self.resources.nodes == 1:
            if not self.resources.efa:
                raise ValueError("resources.efa is for multi-node jobs (resources.nodes > 1)")
            if self.capacity.replace_node_minutes != DEFAULT_REPLACE_NODE_MINUTES:
                raise ValueError("capacity.replace_node_minutes is for multi-node jobs (resources.nodes > 1)")
            return self
        if not is_torchrun(self.training.command):
            raise ValueError(
                f"resources.nodes {self.resources.nodes}: training.command must start torchrun (or python -m "
                "torch.distributed.run), which joins the nodes; spotrun gives it the node count and the "
                "rendezvous through its PET_ environment (docs/guides/multi-node.md)"
            )
        given = group_options_in(self.training.command)
        if given:
            raise ValueError(
                f"training.command gives {', '.join(given)}: spotrun sets the group's torchrun options itself "
                "(the node count, the rendezvous, the restarts from training.restarts_on_error); remove them"
            )
        if self.capacity.deadline is not None:
            raise ValueError(
                "capacity.deadline is for single-node jobs: its policy prices one instance at a time"
            )
        return self

    @field_validator("name")
    @classmethod
    def _name_shape(cls, value: str) -> str:
        if not re.fullmatch(NAME, value):
            raise ValueError(
                f"{value!r} must be lower-case letters, digits and '-', starting with a letter or digit"
            )
        return value

    @field_validator("tags")
    @classmethod
    def _tag_shape(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_TAGS:
            raise ValueError(f"at most {MAX_TAGS} tags")
        for key, tag_value in value.items():
            if not re.fullmatch(TAG_KEY, key) or re.match(RESERVED_TAG_KEY, key):
                raise ValueError(f"{key!r} is not an allowed tag key (aws: and spotrun: are reserved)")
            if len(tag_value) > MAX_TAG_VALUE:
                raise ValueError(f"the value of tag {key!r} is longer than {MAX_TAG_VALUE} characters")
        return value

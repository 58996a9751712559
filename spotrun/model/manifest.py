"""The job manifest: the public contract between a user and spotrun.

A manifest is YAML or JSON. It is validated strictly: unknown fields are errors (a typo must not be silently
ignored) and every error message names the field it is about. The JSON Schema printed by ``spotrun schema`` is
generated from these models, so the documentation cannot drift from the validation.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import PurePosixPath
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonDict

from spotrun.model.contract import CONTRACT_VARIABLES, argv_references
from spotrun.model.deadline_spec import DEADLINE_DESCRIPTION, DEADLINE_PATTERN, check_deadline, is_absolute
from spotrun.model.manifest_rules import (
    AS_WRITTEN,
    CRON,
    ENV_NAME,
    INSTANCE_TYPE,
    MAX_TAG_VALUE,
    MAX_TAGS,
    NAME,
    RATE,
    RESERVED_ENV_NAME,
    RESERVED_TAG_KEY,
    SCHEDULE,
    TAG_KEY,
    Argv,
    CheckpointSignal,
    GpuName,
    InstanceType,
    RelativePath,
    S3Uri,
    StrictModel,
    scalar_to_text,
    split_s3_uri,
)

__all__ = ["MANIFEST_VERSION", "GpuName", "JobManifest", "split_s3_uri"]

MANIFEST_VERSION: Final = "spotrun/v1"
# Nodes a job may ask for in this version: multi-node jobs (one zone, a cluster placement) are not built yet.
MAX_NODES: Final = 1
# training.setup: a handful of commands (install requirements, fetch a tokenizer), never a script in a list.
MAX_SETUP_COMMANDS: Final = 20


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
        json_schema_extra={"maximum": MAX_NODES},
        description="Number of nodes. This version of spotrun runs single-node jobs only, so 1 is the only "
        "value accepted; multi-node jobs will come in a later version.",
    )

    @field_validator("nodes")
    @classmethod
    def _single_node(cls, value: int) -> int:
        if value > MAX_NODES:
            raise ValueError(
                f"{value} nodes asked, but this version of spotrun runs single-node jobs only (nodes: 1); "
                "multi-node jobs will come in a later version"
            )
        return value

    @field_validator("instance_types")
    @classmethod
    def _types_look_like_ec2(cls, value: list[str] | None) -> list[str] | None:
        for name in value or []:
            if not INSTANCE_TYPE.fullmatch(name):
                raise ValueError(f"{name!r} is not an EC2 instance type like g5.xlarge")
        return value

    @model_validator(mode="after")
    def _types_or_names(self) -> Resources:
        if self.instance_types and self.gpu_names:
            raise ValueError("give either instance_types or gpu_names, not both")
        return self


_FALLBACK_AFTER_DEFAULT: Final = 3


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
    avoid_pool_minutes: int = Field(
        30, ge=0, le=1440, description="How long a just-reclaimed pool (type, zone) is avoided."
    )
    deadline: Annotated[str, AS_WRITTEN, AfterValidator(check_deadline)] | None = Field(
        None, json_schema_extra={"pattern": DEADLINE_PATTERN}, description=DEADLINE_DESCRIPTION
    )

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
        # Compared with the default, not looked up in model_fields_set: a stored manifest is read back with
        # every default written out.
        if self.fallback_after_interruptions != _FALLBACK_AFTER_DEFAULT:
            raise ValueError(
                "deadline and fallback_after_interruptions (other than its default) exclude each other: the "
                "deadline decides when to move to on-demand"
            )
        return self


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


# The cap of checkpoint.interval_steps: auto when the manifest gives none (docs/deadlines.md: 4 h).
DEFAULT_MAX_INTERVAL_MINUTES: Final = 240


class CheckpointPolicy(StrictModel):
    """How the training script checkpoints."""

    # _cap_only_with_auto, stated in the schema: no max_interval_minutes (or null) unless interval_steps is auto.
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"not": {"required": ["max_interval_minutes"]}},
                {"properties": {"max_interval_minutes": {"type": "null"}}},
                {"required": ["interval_steps"], "properties": {"interval_steps": {"const": "auto"}}},
            ]
        }
    )

    interval_steps: Annotated[StrictInt, Field(ge=1)] | Literal["auto"] = Field(
        100,
        description="Steps between periodic checkpoints; or 'auto': the agent measures how long the script's "
        "saves take and tells it, through spotrun.training's Run.checkpoint_due, when the next one is due "
        "(time-based, Daly's interval for the pool's rate of interruptions the notice does not cover; "
        "the first after 10 minutes, before any save was measured). See docs/checkpoint-interval.md.",
    )
    max_interval_minutes: int | None = Field(
        None,
        ge=1,
        le=7 * 24 * 60,
        description="With interval_steps 'auto' only: the longest the job may run unsaved whatever the estimate "
        f"says (default {DEFAULT_MAX_INTERVAL_MINUTES}, 4 h). Refused with a number of steps, which it would not "
        "bound.",
    )
    signal: CheckpointSignal = Field(
        "SIGTERM", description="Signal that means 'save a checkpoint now and exit'."
    )
    keep_last: int = Field(3, ge=1, le=100, description="Committed checkpoints kept in S3; older are pruned.")

    @field_validator("interval_steps", mode="before")
    @classmethod
    def _steps_or_auto(cls, value: Any) -> Any:
        # The union's own messages name both branches at length; this says what was given and what is accepted,
        # and keeps what the field took before 'auto' existed (an integral float such as 60.0 is 60 steps).
        if value == "auto":
            return value
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"must be a number of steps (1 or more) or 'auto', got {value!r}")
        return value

    @model_validator(mode="after")
    def _cap_only_with_auto(self) -> CheckpointPolicy:
        if self.max_interval_minutes is not None and self.interval_steps != "auto":
            raise ValueError(
                "max_interval_minutes bounds the 'auto' interval only: with interval_steps "
                f"{self.interval_steps} the checkpoints come every {self.interval_steps} steps"
            )
        return self

    @property
    def auto(self) -> bool:
        """True for ``interval_steps: auto``: the agent decides when a checkpoint is due."""
        return self.interval_steps == "auto"

    @property
    def max_interval_hours(self) -> float:
        """The cap of the ``auto`` interval, hours."""
        return (self.max_interval_minutes or DEFAULT_MAX_INTERVAL_MINUTES) / 60

    @field_validator("signal", mode="before")
    @classmethod
    def _known_signal(cls, value: Any) -> Any:
        # The Literal states the choice in the schema; this says what was given, which pydantic's message does not.
        allowed = get_args(CheckpointSignal)
        if value not in allowed:
            raise ValueError(f"must be one of {list(allowed)}, got {value!r}")
        return value


class TrainingSpec(StrictModel):
    """What runs on the instance."""

    # workdir and code both given is refused by _workdir_or_code (with its message); `not` states it in the schema.
    model_config = ConfigDict(
        json_schema_extra={
            "not": {
                "required": ["workdir", "code"],
                "properties": {"workdir": {"type": "string"}, "code": {"type": "string"}},
            }
        }
    )

    code: S3Uri | None = Field(
        None,
        description="S3 prefix staged into $SPOTRUN_CODE_DIR, where the command runs; or one object whose key "
        "ends .tar.gz (a gzip tar archive, as `spotrun submit` uploads a workdir), extracted there (absolute "
        "paths made relative; '..', links leaving the directory and devices refused).",
    )
    workdir: Annotated[str, AS_WRITTEN] | None = Field(
        None,
        min_length=1,
        description="A local directory (relative: to the manifest file's directory) that `spotrun submit` packs "
        "(honouring .gitignore and .spotrunignore), uploads and submits as training.code. Only the CLI can read "
        "it: the API, the S3 drop and schedules refuse a manifest that still has it. Not with code.",
    )
    command: Argv = Field(
        description="The command as an argv list, never a shell string: ['python', 'train.py']. No shell runs "
        "it, so the agent expands ${NAME} in its arguments itself, when it starts the command, where NAME is a "
        "SPOTRUN_ variable of the checkpoint contract (e.g. ['torchrun', '--nproc-per-node', "
        "'${SPOTRUN_GPUS_PER_NODE}', 'train.py']) or a name of training.env; any other ${...} is refused. A "
        "bare $ is left as written. training.setup's commands are expanded alike.",
    )
    env: dict[Annotated[str, AS_WRITTEN], Annotated[str, BeforeValidator(scalar_to_text)]] = Field(
        default_factory=dict,
        json_schema_extra={
            "propertyNames": {"pattern": ENV_NAME.pattern, "not": {"pattern": RESERVED_ENV_NAME.pattern}},
            # scalar_to_text turns numbers and booleans into text: the schema says they are accepted.
            "additionalProperties": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]},
        },
        description="Extra environment for the command; numbers and booleans become text. Names are "
        "[A-Za-z_][A-Za-z0-9_]*; SPOTRUN_ ones are set by spotrun itself.",
    )
    checkpoint: CheckpointPolicy = Field(default_factory=lambda: CheckpointPolicy())
    max_runtime_minutes: int = Field(
        24 * 60,
        ge=1,
        le=14 * 24 * 60,
        description="Hard limit on training time over all attempts together (like SageMaker's "
        "MaxRuntimeInSeconds): then the command gets the checkpoint signal, its checkpoint is committed and the "
        "job ends with Training.MaxRuntimeExceeded.",
    )
    expected_hours: float | None = Field(
        None,
        gt=0,
        le=14 * 24,
        description="The training's work, in hours on one instance of the job's type without interruptions: "
        "what capacity.deadline plans with (and needs). Not learnt from the job's progress yet.",
    )
    restarts_on_error: int = Field(0, ge=0, le=10, description="Retries of a command that exits non-zero.")
    setup: list[Argv] = Field(
        default_factory=list,
        max_length=MAX_SETUP_COMMANDS,
        description="Commands run before training on each new instance (not again when the command restarts "
        "on the same one), in order, in $SPOTRUN_CODE_DIR, with the command's environment; each an argv list "
        "like command: [['pip', 'install', '-r', 'requirements.txt']]. Their output opens the attempt's log. "
        "One that exits non-zero, cannot be started or outlasts setup_timeout_minutes ends the job with "
        "Setup.Failed (not retried on another instance: the environment is the job's own).",
    )
    setup_timeout_minutes: int = Field(
        30,
        ge=1,
        le=24 * 60,
        description="Time limit of all setup commands together, on each instance. Not counted in "
        "max_runtime_minutes, which is training time; the instance is billed meanwhile.",
    )
    resume_from: Annotated[str, AS_WRITTEN] | None = Field(
        None,
        pattern=r"^[a-z0-9][a-z0-9\-]{0,60}$",
        description="Id of an earlier job (one stopped at its budget or max_runtime_minutes, say): this job "
        "starts from that job's latest committed checkpoint until it commits its own; staging fails if there "
        "is none.",
    )

    @field_validator("setup", mode="before")
    @classmethod
    def _commands_not_one_command(cls, value: Any) -> Any:
        # `setup: [pip, install, x]` is one command where a list of them is due: say so, not "a valid list" twice.
        if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
            raise ValueError(
                "must be a list of commands, each an argv list: [[pip, install, -r, requirements.txt]]"
            )
        return value

    @model_validator(mode="after")
    def _workdir_or_code(self) -> TrainingSpec:
        if self.workdir is not None and self.code is not None:
            raise ValueError(
                "give either workdir (a local directory `spotrun submit` uploads) or code (in S3), not both"
            )
        return self

    @model_validator(mode="after")
    def _command_variables(self) -> TrainingSpec:
        # After the fields: the names training.env defines are known only then.
        for where, argv in [
            ("command", self.command),
            *((f"setup[{i}]", c) for i, c in enumerate(self.setup)),
        ]:
            for name in argv_references(argv):
                if name not in CONTRACT_VARIABLES and name not in self.env:
                    raise ValueError(
                        f"{where}: ${{{name}}} names neither a SPOTRUN_ variable spotrun sets "
                        f"({', '.join(sorted(CONTRACT_VARIABLES))}) nor a name of training.env"
                    )
        return self

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not ENV_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
            if RESERVED_ENV_NAME.match(name):
                raise ValueError(f"{name!r}: SPOTRUN_ variables are set by spotrun itself")
        return value


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
        json_schema_extra={"pattern": SCHEDULE.pattern},
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
        rate = RATE.fullmatch(value)
        if rate:
            singular = rate["value"] == "1"
            if singular != (not rate["unit"].endswith("s")):
                raise ValueError(
                    f"{value!r}: use a singular unit for 1 and a plural one otherwise, e.g. rate(1 day)"
                )
            return value
        if not CRON.fullmatch(value):
            raise ValueError(
                f"{value!r} is not a schedule expression: use cron(min hour day month weekday year) or rate(N unit)"
            )
        return value


# capacity.deadline and training.expected_hours come together (_deadline_has_work); these state it in the schema.
# (null is no value: `type` makes the if/then say so.)
_HAS_DEADLINE: JsonDict = {"required": ["deadline"], "properties": {"deadline": {"type": "string"}}}
_HAS_WORK: JsonDict = {"required": ["expected_hours"], "properties": {"expected_hours": {"type": "number"}}}
_DEADLINE_NEEDS_WORK: JsonDict = {
    "if": {"required": ["capacity"], "properties": {"capacity": _HAS_DEADLINE}},
    "then": {"required": ["training"], "properties": {"training": _HAS_WORK}},
}
_WORK_NEEDS_DEADLINE: JsonDict = {
    "if": {"required": ["training"], "properties": {"training": _HAS_WORK}},
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


class JobManifest(StrictModel):
    """A training job: what to run, on what, with which data, and where its model goes."""

    model_config = ConfigDict(
        json_schema_extra={"allOf": [_DEADLINE_NEEDS_WORK, _WORK_NEEDS_DEADLINE, _NO_INSTANT_ON_A_SCHEDULE]}
    )

    version: Literal["spotrun/v1"] = Field(MANIFEST_VERSION, description="Manifest format version.")
    name: Annotated[str, AS_WRITTEN] = Field(
        json_schema_extra={"pattern": NAME.pattern},
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
            "propertyNames": {"pattern": TAG_KEY.pattern, "not": {"pattern": RESERVED_TAG_KEY.pattern}},
            "additionalProperties": {"type": "string", "maxLength": MAX_TAG_VALUE},
        },
        description="Tags put on every instance of the job: at most 40; keys of letters, digits, spaces and "
        "_.:/=+-@, 1-128 characters, not starting with aws: or spotrun:; values at most 256 characters.",
    )

    @model_validator(mode="after")
    def _deadline_has_work(self) -> JobManifest:
        if self.capacity.deadline is not None and self.training.expected_hours is None:
            raise ValueError("capacity.deadline needs training.expected_hours (the work to fit before it)")
        if self.capacity.deadline is None and self.training.expected_hours is not None:
            raise ValueError(
                "training.expected_hours is only used with capacity.deadline; give both or neither"
            )
        if self.schedule is not None and self.capacity.deadline and is_absolute(self.capacity.deadline):
            raise ValueError(
                "capacity.deadline: an absolute time on a schedule would be every run's deadline; use a "
                "duration after submission such as '36h'"
            )
        return self

    @field_validator("name")
    @classmethod
    def _name_shape(cls, value: str) -> str:
        if not NAME.fullmatch(value):
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
            if not TAG_KEY.fullmatch(key) or RESERVED_TAG_KEY.match(key):
                raise ValueError(f"{key!r} is not an allowed tag key (aws: and spotrun: are reserved)")
            if len(tag_value) > MAX_TAG_VALUE:
                raise ValueError(f"the value of tag {key!r} is longer than {MAX_TAG_VALUE} characters")
        return value

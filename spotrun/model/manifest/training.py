"""The manifest's training: what runs on the instance, and how it checkpoints.

:class:`TrainingSpec` and its :class:`CheckpointPolicy`, the ``training`` of a
:class:`~spotrun.model.manifest.schema.JobManifest`, with the rules only they use.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import BeforeValidator, ConfigDict, Field, StrictInt, field_validator, model_validator

from spotrun.model.contract_variables import CONTRACT_VARIABLES, argv_references, expand_argv
from spotrun.model.manifest.exec_limits import (
    AGENT_ENVIRONMENT_RESERVE,
    ARG_MAX_TOTAL,
    environment_problem,
    exec_size,
    string_problem,
)
from spotrun.model.manifest.gpu_idle import GpuIdlePolicy
from spotrun.model.manifest.rules import (
    AS_WRITTEN,
    ENV_NAME,
    RESERVED_ENV_NAME,
    Argv,
    CheckpointSignal,
    S3Uri,
    StrictModel,
    scalar_to_text,
)
from spotrun.model.manifest.secrets import EXAMPLES as SECRET_REFERENCE_EXAMPLES
from spotrun.model.manifest.secrets import REFERENCE_PATTERN as SECRET_REFERENCE_PATTERN
from spotrun.model.manifest.secrets import parse_reference

__all__ = ["DEFAULT_MAX_INTERVAL_MINUTES", "MAX_SETUP_COMMANDS", "CheckpointPolicy", "TrainingSpec"]

# training.setup: a handful of commands (install requirements, fetch a tokenizer), never a script in a list.
MAX_SETUP_COMMANDS: Final = 20

# The cap of checkpoint.interval_steps: auto when the manifest gives none (docs/guides/deadlines.md: 4 h).
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
        "the first after 10 minutes, before any save was measured). See docs/guides/checkpoint-interval.md.",
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


# A multi-node job's training.hang_minutes when the manifest gives none: a collective that waits this long on a
# peer is stuck, not slow (NCCL's own watchdog defaults to 10 minutes per collective).
DEFAULT_GROUP_HANG_MINUTES: Final = 30


# torchrun options that spotrun sets for a multi-node job through their PET_ variables: written on the command line
# they would win over spotrun's (torch.distributed.run reads PET_<OPTION> only when the option is not given).
GROUP_OPTIONS: Final = (
    "--nnodes",
    "--node-rank",
    "--node_rank",
    "--rdzv-backend",
    "--rdzv_backend",
    "--rdzv-endpoint",
    "--rdzv_endpoint",
    "--rdzv-id",
    "--rdzv_id",
    "--rdzv-conf",
    "--rdzv_conf",
    "--local-addr",
    "--local_addr",
    "--master-addr",
    "--master_addr",
    "--master-port",
    "--master_port",
    "--standalone",
    "--max-restarts",
    "--max_restarts",
)


def group_options_in(argv: list[str]) -> list[str]:
    """The options of :data:`GROUP_OPTIONS` that ``argv`` gives (as ``--opt`` or ``--opt=value``)."""
    return [arg for arg in argv if arg.split("=", 1)[0] in GROUP_OPTIONS]


def is_torchrun(argv: list[str]) -> bool:
    """Whether ``argv`` starts ``torchrun`` (or ``python -m torch.distributed.run``), which joins a job's nodes."""
    launcher = PurePosixPath(argv[0]).name if argv else ""
    if launcher == "torchrun":
        return True
    return launcher.startswith("python") and argv[1:3] == ["-m", "torch.distributed.run"]


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
            "propertyNames": {"pattern": ENV_NAME, "not": {"pattern": RESERVED_ENV_NAME}},
            # scalar_to_text turns numbers and booleans into text: the schema says they are accepted.
            "additionalProperties": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]},
        },
        description="Extra environment for the command, plain values only (they are stored with the job and "
        "shown by the API): numbers and booleans become text. A password, token or key goes in "
        "training.secrets instead. Names are [A-Za-z_][A-Za-z0-9_]*; SPOTRUN_ ones are set by spotrun itself.",
    )
    secrets: dict[Annotated[str, AS_WRITTEN], Annotated[str, AS_WRITTEN]] = Field(
        default_factory=dict,
        json_schema_extra={
            "propertyNames": {"pattern": ENV_NAME, "not": {"pattern": RESERVED_ENV_NAME}},
            "additionalProperties": {"type": "string", "pattern": SECRET_REFERENCE_PATTERN},
        },
        description="Environment names mapped to references of secrets, never values: a Secrets Manager "
        f"secret or an SSM Parameter Store parameter, by ARN ({SECRET_REFERENCE_EXAMPLES}). The agent reads "
        "each on the instance with the job's credentials when an attempt starts and puts its value in the "
        "environment of the command and of training.setup only; the job's record, events and answers keep the "
        "reference, and the value is masked in the logs. The deployment must allow each reference (its CDK "
        "option secret_references). One that cannot be read ends the job with Secrets.Unavailable. Names as "
        "in training.env, and not one of its names. See docs/guides/secrets.md.",
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
        "what capacity.deadline plans with. With a deadline, give it or training.total_steps, not both.",
    )
    total_steps: int | None = Field(
        None,
        ge=1,
        le=10**12,
        description="The training's work as the script's step count (the step Run.report_step reaches at the "
        "end): with capacity.deadline instead of expected_hours, whose hours are then learnt from the job's own "
        "progress reports (docs/guides/deadlines.md). Until enough progress exists the policy decides without them, "
        "and admission cannot check the deadline.",
    )
    restarts_on_error: int = Field(0, ge=0, le=10, description="Retries of a command that exits non-zero.")
    hang_minutes: float | None = Field(
        None,
        ge=0.05,
        le=24 * 60,
        description="Once the script has reported a step (Run.report_step), how long its steps may stop "
        "advancing before the attempt counts as hung (a rank stuck in a collective keeps its processes alive "
        "and its GPUs idle): the command is stopped, the instances are kept, and the job restarts from its last "
        "committed checkpoint. Default: 30 for a multi-node job, none (never hung) for one node.",
    )
    gpu_idle: GpuIdlePolicy | None = Field(
        None,
        description="The idle policy: when every GPU of a node stays below utilization_below percent for "
        "minutes, the command is stopped and the job fails (action 'fail') or starts again from its last "
        "committed checkpoint on a new instance (action 'relaunch'), so an idle instance is not billed on. "
        "Absent: no idle policy. See docs/guides/gpu-health.md.",
    )
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
                if name in self.secrets:
                    # An argv is readable by every process of the instance (ps), and shown in the log.
                    raise ValueError(
                        f"{where}: ${{{name}}} names a secret of training.secrets, which reaches the command "
                        "only through its environment: read os.environ[...] in the script instead"
                    )
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
            if not re.fullmatch(ENV_NAME, name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
            if re.match(RESERVED_ENV_NAME, name):
                raise ValueError(f"{name!r}: SPOTRUN_ variables are set by spotrun itself")
        problem = environment_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _commands_fit_execve(self) -> TrainingSpec:
        # After _command_variables: every ${NAME} is a contract variable or one of training.env. The contract's
        # are left as written (short paths and numbers); training.env's are expanded, as the agent will.
        known = {name: f"${{{name}}}" for name in CONTRACT_VARIABLES} | self.env
        budget = ARG_MAX_TOTAL - AGENT_ENVIRONMENT_RESERVE
        for where, argv in [
            ("command", self.command),
            *((f"setup[{i}]", c) for i, c in enumerate(self.setup)),
        ]:
            expanded = expand_argv(argv, known)
            for index, argument in enumerate(expanded):
                problem = string_problem(f"{where}[{index}]", argument)
                if problem is not None:
                    raise ValueError(
                        problem + (" (after ${NAME} expansion)" if argument != argv[index] else "")
                    )
            size = exec_size(expanded, self.env)
            if size > budget:
                raise ValueError(
                    f"{where} with training.env: {size:,} bytes of arguments and environment (each string with "
                    f"its NUL and pointer); Linux's execve(2) takes at most {ARG_MAX_TOTAL:,} in all (a quarter "
                    f"of the 8 MiB stack limit), of which spotrun keeps {AGENT_ENVIRONMENT_RESERVE:,} for the "
                    "environment the agent adds: put large data in a file and pass its path"
                )
        return self

    @field_validator("secrets")
    @classmethod
    def _secret_names_and_references(cls, value: dict[str, str]) -> dict[str, str]:
        for name, reference in value.items():
            if not re.fullmatch(ENV_NAME, name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
            if re.match(RESERVED_ENV_NAME, name):
                raise ValueError(f"{name!r}: SPOTRUN_ variables are set by spotrun itself")
            try:
                parse_reference(reference)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _secrets_apart_from_env(self) -> TrainingSpec:
        both = sorted(set(self.secrets) & set(self.env))
        if both:
            raise ValueError(
                f"{', '.join(both)}: named in both training.env and training.secrets; a variable has one value, "
                "plain (env) or secret (secrets)"
            )
        return self

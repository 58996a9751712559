"""What the control plane asks of the agent, and what the agent reports back.

The control plane writes an :class:`AgentCommand` as JSON to the jobs bucket and sends only its key through
SSM Run Command. The command carries no task token: the agent reports to the API's agent route
(``report_url``), signed with its instance's credentials, and the control plane answers the workflow with the
token it keeps in the job record: success with a :class:`StageResult` or :class:`TrainResult`, or failure with
one of the error names below and a JSON cause.

A ``notice`` command is the exception: the control plane sends it when EC2 warns that the instance will be
reclaimed (the agent also watches IMDS for that warning; this is the second way in). The agent hands it to the
running ``train`` step of the same job and attempt, which checkpoints and reports ``Spot.Interrupted``; the
notice itself is answered to nobody, and its ``report_url`` may be empty.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any, Final, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from spotrun.model.agent_protocol.api_paths import AGENT_CREDENTIALS_PATH, AGENT_REPORTS_PATH
from spotrun.model.base import DeferredModel
from spotrun.model.job.interruption_rate import PoolRate
from spotrun.model.layout import BUCKET_NAME_PATTERN, check_job_id
from spotrun.model.manifest.rules import JsonFloat, JsonInt
from spotrun.model.manifest.schema import JobManifest

# The steps the workflow waits on (with a task token); "notice" is sent by the EC2 event handler, outside them.
WorkflowStep = Literal["stage", "train"]
AgentStep = Literal["stage", "train", "notice"]

NOTICE_STEP = "notice"

STAGING_FAILED = "Staging.Failed"
# A command of the manifest's training.setup failed on the instance: the job ends (its environment is its own, so
# another instance would fail alike).
SETUP_FAILED = "Setup.Failed"
TRAINING_FAILED = "Training.Failed"
# A reference of training.secrets could not be read on the instance: the job ends (another instance would read
# it with the same grants).
SECRETS_UNAVAILABLE = "Secrets.Unavailable"
SPOT_INTERRUPTED = "Spot.Interrupted"
# The script's steps stopped advancing for training.hang_minutes (a rank stuck in a collective): the command was
# stopped; the workflow restarts the group from its last committed checkpoint on the instances still running.
TRAINING_HUNG = "Training.Hung"
# Every GPU of a node stayed below training.gpu_idle.utilization_below for its minutes: the command was stopped so
# that an idle instance is released; the manifest's gpu_idle.action says whether the job fails or is relaunched.
TRAINING_IDLE = "Training.Idle"
# The step's limits ran out: the checkpoint was committed as on a warning, and the job ends (no relaunch).
BUDGET_EXCEEDED = "Budget.Exceeded"
MAX_RUNTIME_EXCEEDED = "Training.MaxRuntimeExceeded"

# AWS region names (us-east-1, us-gov-west-1, ap-southeast-4, eu-central-2, ...): area, optional partition
# qualifier, direction, number.
REGION: Final = r"^[a-z]{2}(?:-[a-z]+)+-[0-9]{1,2}$"
BUCKET: Final = rf"^{BUCKET_NAME_PATTERN}$"


def check_relative_path(value: str, field: str) -> str:
    """Return ``value`` when it is a path that stays inside the directory it is joined to.

    Parameters
    ----------
    value
        A path from the command (a data input's destination, the model's path under the output directory).
    field
        The field's name, for the message.

    Raises
    ------
    ValueError
        When it is empty, absolute, holds a ``..`` component or a NUL character.
    """
    path = PurePosixPath(value)
    if not value or "\x00" in value or path.is_absolute() or ".." in path.parts:
        raise ValueError(f"{field}: {value!r} is not a relative path inside its directory")
    return value


# What a failure report may carry: Step Functions' limits on SendTaskFailure (error <= 256 characters, cause
# <= 32768), which the agents' API function passes the report on to.
MAX_ERROR_CHARS: Final = 256
MAX_CAUSE_CHARS: Final = 32768
# A command's report_url must be the agent's reports route (spotrun.model.agent_protocol.api_paths) on the
# deployment's API; anything else is refused, so that a rewritten command cannot send the instance's signed
# reports elsewhere.
_API_STAGE: Final = (
    r"^(?:https://[a-z0-9]+\.execute-api\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?/[A-Za-z0-9_-]+"
    r"|http://127\.0\.0\.1:[0-9]{1,5}(?:/[A-Za-z0-9_-]+)?)"
)
REPORT_URL: Final = _API_STAGE + re.escape(AGENT_REPORTS_PATH) + "$"
# Where the agent asks for its job's S3 credentials: the same API (its environment names it, since the command
# document can only be read with those credentials).
CREDENTIALS_URL: Final = _API_STAGE + re.escape(AGENT_CREDENTIALS_PATH) + "$"


# torchrun's c10d rendezvous port on node 0 (torch.distributed.run's documented default for --rdzv-endpoint).
RENDEZVOUS_PORT: Final = 29400
_IPV4: Final = r"^(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}$"


class NodeGroup(DeferredModel):
    """Where a multi-node step's node stands in its group, and how ``torchrun`` finds the others.

    The agent gives ``torchrun`` these through its ``PET_`` environment (``--nnodes``, ``--node-rank``,
    ``--rdzv-backend c10d``, ``--rdzv-endpoint``, ``--rdzv-id``): node 0 hosts the c10d store, the others join it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: int = Field(ge=2, le=16, description="Nodes in the group.")
    node: int = Field(ge=0, description="This node's place in the group (0 hosts the rendezvous).")
    rendezvous_host: str = Field(pattern=_IPV4, description="Node 0's private IPv4 address.")
    rendezvous_port: int = Field(RENDEZVOUS_PORT, ge=1024, le=65535)
    rendezvous_id: str = Field(
        pattern=r"^[A-Za-z0-9_-]{1,128}$", description="The group's run: the job and the attempt."
    )
    efa: bool = Field(
        False, description="The instances have EFA interfaces: NCCL gets the libfabric environment."
    )

    @model_validator(mode="after")
    def _node_in_group(self) -> NodeGroup:
        if self.node >= self.nodes:
            raise ValueError(f"node {self.node} is not in a group of {self.nodes}")
        return self

    @property
    def endpoint(self) -> str:
        """``host:port`` of the rendezvous."""
        return f"{self.rendezvous_host}:{self.rendezvous_port}"


class GpuIdleWatch(DeferredModel):
    """For a train step: when the agent stops an idle training (manifest ``training.gpu_idle``, time-scaled)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    utilization_below: float = Field(gt=0, le=100, description="Percent; every GPU of the node below it.")
    seconds: float = Field(gt=0, description="For this long without a break, the command is stopped.")


class AgentCommand(DeferredModel):
    """One step for the agent to run for one attempt of a job.

    The agent checks every field again when it reads the document, although the control plane wrote it: the
    job id has the shape the control plane mints, the region and the bucket AWS's, and every path in the
    manifest stays inside its directory. A document that fails is refused before any directory is made.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: AgentStep
    job_id: str
    attempt: int = Field(ge=1)
    report_url: str = Field(
        "", description="The API's agent route, where the step's heartbeats and result are posted (signed)."
    )
    region: str
    jobs_bucket: str
    manifest: JobManifest
    heartbeat_seconds: float = Field(gt=0, description="How often the agent posts a heartbeat.")
    poll_seconds: float = Field(
        gt=0, description="How often the agent polls IMDS and the checkpoint directory."
    )
    max_runtime_seconds: float | None = Field(
        None,
        gt=0,
        description="Training time this attempt may still use: what is left of manifest.training."
        "max_runtime_minutes after the job's earlier attempts (the control plane computes it). Real seconds, "
        "never time-scaled. Unset: the whole max_runtime_minutes.",
    )
    stop_at: datetime | None = Field(
        None,
        description="When the job's budget.max_usd runs out at this attempt's price, less a margin for the "
        "checkpoint upload: the agent then stops the command as on an interruption notice, commits its "
        "checkpoint and reports Budget.Exceeded (the stage step: stops training.setup and reports it). Unset: "
        "no budget.",
    )
    stop_grace_seconds: float = Field(
        60.0,
        gt=0,
        description="How long the command gets to save and exit after the checkpoint signal when stop_at or "
        "max_runtime_seconds runs out.",
    )

    group: NodeGroup | None = Field(
        None, description="For a multi-node job: this node's place in its group and the rendezvous."
    )
    hang_seconds: float | None = Field(
        None,
        gt=0,
        description="For a train step: how long the script's reported step may stop advancing before the agent "
        "stops the command and reports Training.Hung (manifest training.hang_minutes, time-scaled). Unset: never.",
    )
    gpu_idle: GpuIdleWatch | None = Field(
        None,
        description="For a train step: stop the command and report Training.Idle when the node's GPUs idle this "
        "long (manifest training.gpu_idle). Unset: never.",
    )
    telemetry_seconds: float = Field(
        30.0,
        gt=0,
        description="How often the agent puts the telemetry gathered since its last put (training metrics, GPU "
        "readings) as the next part under the job's telemetry prefix; time-scaled.",
    )
    pool_rate: PoolRate | None = Field(
        None,
        description="For a train step of a manifest with checkpoint.interval_steps auto: the job's spot "
        "interruption rate as the control plane estimates it (spotrun.model.job.interruption_rate); the agent "
        "counts the share the notice does not cover and computes the checkpoint interval from it. Unset: the "
        "estimate's prior.",
    )

    @field_validator("job_id")
    @classmethod
    def _job_id_shape(cls, value: str) -> str:
        return check_job_id(value)

    @field_validator("report_url")
    @classmethod
    def _report_url_shape(cls, value: str) -> str:
        if value and not re.fullmatch(REPORT_URL, value):
            raise ValueError(f"{value!r} is not the agent route of a spotrun API")
        return value

    @field_validator("region")
    @classmethod
    def _region_shape(cls, value: str) -> str:
        if not re.fullmatch(REGION, value):
            raise ValueError(f"{value!r} is not an AWS region name such as us-east-1")
        return value

    @field_validator("jobs_bucket")
    @classmethod
    def _bucket_shape(cls, value: str) -> str:
        if not re.fullmatch(BUCKET, value) or ".." in value:
            raise ValueError(f"{value!r} is not an S3 bucket name")
        return value

    @model_validator(mode="after")
    def _paths_inside(self) -> AgentCommand:
        # The manifest was validated at submission; its paths are joined to the job's directories here, so the
        # agent checks them again itself.
        for index, data_input in enumerate(self.manifest.data.inputs):
            check_relative_path(data_input.destination, f"manifest.data.inputs[{index}].destination")
        check_relative_path(self.manifest.outputs.model, "manifest.outputs.model")
        return self

    @model_validator(mode="after")
    def _rate_only_for_auto(self) -> AgentCommand:
        # Only the train step of an auto interval reads it: anywhere else it would be carried and ignored.
        if self.pool_rate is not None and (
            self.step != "train" or not self.manifest.training.checkpoint.auto
        ):
            raise ValueError(
                "pool_rate is for the train step of a manifest with checkpoint.interval_steps auto"
            )
        return self


class StageResult(DeferredModel):
    """Reported when staging succeeded."""

    files: JsonInt
    bytes: JsonInt
    seconds: JsonFloat
    checkpoint_restored: str | None = None  # S3 prefix of the committed checkpoint put in place
    restored_step: JsonInt | None = None
    # Seconds the manifest's training.setup commands took on this instance (None: it has none); not in ``seconds``.
    setup_seconds: JsonFloat | None = None


class OutputObject(DeferredModel):
    """One file of the output directory, uploaded to the jobs bucket."""

    key: str
    size: JsonInt
    sha256: str


class OutputList(DeferredModel):
    """Where the list of uploaded output files is, and what it holds.

    The list itself stays in S3: a model directory of thousands of files would pass the 256 KiB that Step
    Functions allows a task result (``SendTaskSuccess`` output), so the workflow carries only this reference.
    """

    key: str = Field(description="Key, in the jobs bucket, of a JSON array of OutputObject.")
    count: JsonInt = Field(ge=0, description="Files in the list.")
    bytes: JsonInt = Field(ge=0, description="Their total size.")


class NodeDone(DeferredModel):
    """What a node other than node 0 reports when its part of a multi-node step succeeded (node 0 reports the
    step's result, :class:`StageResult` or :class:`TrainResult`)."""

    node: JsonInt = Field(ge=1)
    seconds: JsonFloat


class TrainResult(DeferredModel):
    """Reported when the training command exited 0 and its outputs were uploaded."""

    exit_code: JsonInt = 0
    seconds: JsonFloat
    last_checkpoint_step: JsonInt | None = None
    last_step: JsonInt | None = None  # the last step the script reported (spotrun.training.Run.report_step)
    outputs: OutputList
    model_key: str  # key of the model file, or prefix of the model directory
    model_sha256: str
    log_key: str


class FailureCause(DeferredModel):
    """The JSON ``cause`` sent with ``SendTaskFailure``."""

    message: str
    exit_code: int | None = None
    log_tail: str | None = None
    log_key: str | None = None
    checkpoint: str | None = None  # for Spot.Interrupted: S3 prefix of the checkpoint committed in the notice
    checkpoint_step: int | None = None
    # The last step the script reported (spotrun.training.Run.report_step): with checkpoint_step, how much
    # work the interruption or failure lost.
    last_step: int | None = None
    # The command did not exit as the checkpoint contract asks after the checkpoint signal, and its last step's
    # checkpoint was not committed: how it ended and its last line (a crash in the middle of its save, say).
    save_failed: str | None = None


class CaughtError(DeferredModel):
    """The ``{"Error", "Cause"}`` a Catch puts in the workflow state, read once for every step that needs it."""

    error: str | None  # the error name; None when the state holds none
    cause: str  # the cause as text ("" when there is none)
    failure: FailureCause | None  # the agent's cause, when the cause is a FailureCause document
    lambda_message: str | None  # the errorMessage, when the cause is a Lambda error payload


def read_caught_error(error: Mapping[str, Any]) -> CaughtError:
    """Read what a Catch caught: the cause is the agent's :class:`FailureCause` JSON, a Lambda error payload
    (``{"errorMessage", "errorType", ...}``), or plain text.

    Parameters
    ----------
    error
        The ``{"Error", "Cause"}`` object (``ResultPath`` of the Catch).

    Returns
    -------
    CaughtError
        The error name and the cause, parsed as far as it goes; never raises on a cause it cannot parse.
    """
    text = str(error.get("Cause") or "")
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    failure = None
    lambda_message = None
    if isinstance(document, dict):
        if "errorMessage" in document:
            lambda_message = str(document["errorMessage"])
        try:
            failure = FailureCause.model_validate(document)
        except ValidationError:
            failure = None
    return CaughtError(
        error=None if "Error" not in error else str(error["Error"]),
        cause=text,
        failure=failure,
        lambda_message=lambda_message,
    )

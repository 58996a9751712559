"""What a step needs from the outside world, and what it produces for the workflow."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from spotrun.agent.reporter import WorkflowReporter
from spotrun.agent.secrets import Masker, SecretReader
from spotrun.agent.supervision.gpu import MetricsPort
from spotrun.agent.supervision.spot_notices import NoticeWatcher
from spotrun.agent.transfer.download import DEFAULT_WORKERS, DirectGetter
from spotrun.model.agent_protocol.command import FailureCause
from spotrun.model.job.attempt import CheckpointIntervalUsed
from spotrun.model.job.telemetry import GpuLine


@dataclass
class StepContext:
    """The ports and settings of one agent step.

    Parameters
    ----------
    s3
        A boto3 S3 client (or a fake with the same methods).
    reporter
        Where the step's result goes.
    nvme_root
        Root of the instance-store volume (``SPOTRUN_NVME_ROOT``).
    base_env
        The environment the training command inherits (the agent's own, normally).
    watcher
        Holds (and, during training, polls for) the interruption notice.
    abandoned
        Set when the workflow stopped waiting for the task (a heartbeat was refused).
    workers
        Files copied at once when staging and uploading.
    metrics
        CloudWatch, where the GPU and training metrics go while training; None: not published there (the GPUs
        are still sampled for the telemetry, the heartbeats and the idle watch).
    instance_id
        The instance's id (the ``InstanceId`` dimension of the metrics), or None when unknown.
    gpus_per_node
        Counts the instance's GPUs (``SPOTRUN_GPUS_PER_NODE``), once per train step.
    local_ipv4
        The instance's private IPv4 address (IMDS ``local-ipv4``): a multi-node job's node gives it to
        ``torchrun`` as ``PET_LOCAL_ADDR``; None when unknown.
    instance_type
        The instance's type (IMDS ``instance-type``): a group with an EFA sets the NCCL variables it calls for;
        None when unknown.
    logs
        A boto3 CloudWatch Logs client signed with the job's credentials: the live copy of the attempt's log
        (:mod:`spotrun.agent.supervision.log_shipper`); None: no live copy.
    checkpoint_interval
        Set by the train step under ``interval_steps: auto``: the interval the script was told, which the
        heartbeats carry to the job's record.
    gpu
        Set by the train step at each GPU sample: the node's latest, which the heartbeats carry to the job's
        record.
    secret_reader
        Reads ``training.secrets`` with the job's credentials; None: none can be read.
    direct
        Makes staging's and the checkpoint restore's GETs of small objects (the CRT's S3 client, signed with
        the same credentials as ``s3``); None: ``s3`` makes them.
    masker
        Set by the stage and train steps once they read the job's secrets: masks their values in what leaves
        the instance (the uploaded log, log tails, the live log shipper's lines).
    """

    s3: Any
    reporter: WorkflowReporter
    nvme_root: Path
    base_env: Mapping[str, str]
    watcher: NoticeWatcher
    abandoned: threading.Event = field(default_factory=threading.Event)
    workers: int = DEFAULT_WORKERS
    metrics: MetricsPort | None = None
    instance_id: Callable[[], str | None] = field(default=lambda: None)
    gpus_per_node: Callable[[], int] = field(default=lambda: 0)
    local_ipv4: Callable[[], str | None] = field(default=lambda: None)
    instance_type: Callable[[], str | None] = field(default=lambda: None)
    checkpoint_interval: CheckpointIntervalUsed | None = None
    gpu: GpuLine | None = None
    secret_reader: SecretReader | None = None
    masker: Masker = field(default_factory=Masker)
    logs: Any = None
    direct: DirectGetter | None = None


@dataclass(frozen=True)
class StepReport:
    """The answer a step sends to the workflow: an output, a failure, or nothing (the task was abandoned)."""

    output: BaseModel | None = None
    error: str | None = None
    cause: FailureCause | None = None

    @classmethod
    def succeeded(cls, output: BaseModel) -> StepReport:
        """A success with ``output``."""
        return cls(output=output)

    @classmethod
    def failed(cls, error: str, cause: FailureCause) -> StepReport:
        """A failure named ``error``."""
        return cls(error=error, cause=cause)

    @property
    def abandoned(self) -> bool:
        """True when there is nothing to report."""
        return self.output is None and self.error is None

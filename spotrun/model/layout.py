"""Where spotrun's things live: keys in the jobs and archive buckets, the tags on its instances, and the
directories on the instance's NVMe.

One module so that the control plane, the agent, the CDK app (its IAM grants and S3 rules), the emulator and
the tests agree on every path and tag. Standard library only: it is copied onto instances with
``spotrun.training``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

# The jobs bucket: users drop manifests under MANIFEST_PREFIX; everything a job keeps is under JOBS_PREFIX;
# the manifests of schedules are under SCHEDULES_PREFIX.
MANIFEST_PREFIX = "manifests/"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
REJECTION_SUFFIX = ".rejected.json"  # the report beside a dropped manifest that was refused
JOBS_PREFIX = "jobs/"
SCHEDULES_PREFIX = "schedules/"
# Code archives the CLI packs from a local directory (``training.workdir``), content-addressed:
# ``code/<sha256>.tar.gz``. Beside jobs/, not under it: a job reads its code, never another job's objects.
CODE_PREFIX = "code/"
CODE_ARCHIVE_SUFFIX = ".tar.gz"

# The archive bucket: where a model goes when the manifest names no archive.destination, and the name of the
# metadata document written beside every archived model.
DEFAULT_ARCHIVE_PREFIX = "models/"
ARCHIVE_METADATA_NAME = "spotrun-model.json"

# The jobs table's listing indexes (declared in spotrun.shape, queried by spotrun.aws.job_store), newest first:
# by status, and over every job (job items only carry KIND_ATTRIBUTE, "JOB": the partition of ALL_JOBS_INDEX).
BY_STATUS_INDEX = "by-status"
ALL_JOBS_INDEX = "all-jobs"
KIND_ATTRIBUTE = "kind"

# Tags on every instance spotrun launches. The IAM policies let spotrun touch only instances with JOB_ID_TAG.
JOB_ID_TAG = "spotrun:job-id"
ATTEMPT_TAG = "spotrun:attempt"

# The shape of every job id the control plane mints (spotrun.model.job.ids.job_id_for): a slug of the manifest's
# name (lower-case letters, digits and '-', at most 48, starting with a letter or digit), '-', 12 hex digits.
# It is what keeps a job's keys under its own prefix and its directories under the NVMe root: no '/', no '.'.
JOB_ID_PATTERN = r"[a-z0-9][a-z0-9-]{0,47}-[0-9a-f]{12}"
_JOB_ID: Final = rf"^{JOB_ID_PATTERN}$"
# S3 general purpose bucket names: 3 to 63 of lower-case letters, digits, '.' and '-', starting and ending with a
# letter or digit (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html); no '..' either,
# which a pattern over single characters cannot say: check it beside the pattern.
BUCKET_NAME_PATTERN = r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]"

# Directories the agent creates on the instance: the agent and the training command it starts run as the same
# user (root, through SSM Run Command), and nobody else on the instance needs to read a job's data or outputs.
DIRECTORY_MODE = 0o700

# The resident agent of an instance (spotrun.agent.resident_server) and the SSM document's script that hands it each
# command: its runtime directory (tmpfs, root only), the inbox in it where each command URI arrives as a file,
# its pid file ("<pid> <start time>"), and the log every agent process of the instance appends to.
AGENT_RUN_DIR = "/run/spotrun"
AGENT_INBOX = "inbox"
AGENT_PID_FILE = "agent.pid"
AGENT_LOG_FILE = "/var/log/spotrun-agent.log"

CHECKPOINT_DIR_PREFIX = "step-"
COMMIT_MARKER = "_COMMITTED.json"
# A multi-node job's checkpoint: each node's agent uploads its own files, then its part marker under this
# sub-prefix; the commit marker follows once every node's part is there.
PART_MARKERS = "_PARTS"
# Anything in the local checkpoint directory whose name starts with this is work in progress (a checkpoint
# being written by spotrun.training, or being restored by the agent) and is never read or uploaded.
TEMP_PREFIX = "."


def code_archive_key(sha256: str) -> str:
    """The key of the code archive whose content has this SHA-256 (64 lower-case hex digits)."""
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError(f"{sha256!r} is not a SHA-256 in lower-case hex")
    return f"{CODE_PREFIX}{sha256}{CODE_ARCHIVE_SUFFIX}"


def is_code_archive_key(key: str) -> bool:
    """Whether ``training.code``'s key names one archive to extract (``.tar.gz``) rather than a prefix to copy."""
    return key.endswith(CODE_ARCHIVE_SUFFIX)


def is_manifest_key(key: str) -> bool:
    """Whether a key under the manifest prefix is a manifest (and not, say, our own rejection report)."""
    return (
        key.startswith(MANIFEST_PREFIX)
        and key.endswith(MANIFEST_SUFFIXES)
        and not key.endswith(REJECTION_SUFFIX)
    )


def rejection_report_key(manifest_key: str) -> str:
    """Where the report of a refused manifest goes: beside it, so the user sees it where they dropped it."""
    return manifest_key + REJECTION_SUFFIX


def schedule_manifest_key(name: str, manifest_digest: str) -> str:
    """Key of the manifest a schedule starts: it carries the manifest's digest, so a refused duplicate never
    replaces the existing schedule's manifest."""
    return f"{SCHEDULES_PREFIX}{name}/{manifest_digest}.json"


def check_job_id(job_id: str) -> str:
    """Return ``job_id`` when it has the shape the control plane mints (:data:`JOB_ID_PATTERN`).

    Raises
    ------
    ValueError
        When it does not: a path separator, a ``..``, a NUL or anything else that could lead a key or a
        directory out of the job's own.
    """
    if not re.fullmatch(_JOB_ID, job_id):
        raise ValueError(
            f"{job_id!r} is not a spotrun job id (<name>-<12 hex digits>, lower-case letters, digits and '-')"
        )
    return job_id


def job_prefix(job_id: str) -> str:
    """Key prefix of everything a job keeps in the jobs bucket."""
    return f"{JOBS_PREFIX}{job_id}/"


def agent_command_key(job_id: str, attempt: int, step: str, node: int = 0) -> str:
    """Key of the command document the agent reads for one step of one attempt (on one node of a group)."""
    suffix = f"-node{node}" if node else ""
    return f"{job_prefix(job_id)}agent/attempt-{attempt:03d}-{step}{suffix}.json"


_COMMAND_KEY: Final = (
    rf"^{re.escape(JOBS_PREFIX)}(?P<job>{JOB_ID_PATTERN})"
    r"/agent/attempt-(?P<attempt>[0-9]{3,})-(?P<step>[a-z]+)(?:-node[1-9][0-9]?)?\.json$"
)


def parse_agent_command_key(key: str) -> tuple[str, int, str]:
    """``(job_id, attempt, step)`` of a command document's key (:func:`agent_command_key`).

    Raises
    ------
    ValueError
        When ``key`` is not one.
    """
    match = re.fullmatch(_COMMAND_KEY, key)
    if match is None:
        raise ValueError(f"{key!r} is not the key of an agent command document")
    return match["job"], int(match["attempt"]), match["step"]


def checkpoints_prefix(job_id: str) -> str:
    """Key prefix under which each checkpoint is a sub-prefix ``step-<012d>/``."""
    return f"{job_prefix(job_id)}checkpoints/"


def checkpoint_name(step: int) -> str:
    """Name of the checkpoint taken after ``step`` (a directory locally, a sub-prefix in S3)."""
    return f"{CHECKPOINT_DIR_PREFIX}{step:012d}"


def checkpoint_step(name: str) -> int | None:
    """Step encoded in a checkpoint name, or None when ``name`` is not one."""
    if not name.startswith(CHECKPOINT_DIR_PREFIX):
        return None
    digits = name.removeprefix(CHECKPOINT_DIR_PREFIX)
    return int(digits) if digits.isdigit() else None


def checkpoint_prefix(job_id: str, step: int) -> str:
    """Key prefix of the checkpoint taken after ``step``, ending with ``/``."""
    return f"{checkpoints_prefix(job_id)}{checkpoint_name(step)}/"


def commit_marker_key(job_id: str, step: int) -> str:
    """Key of the marker that makes the checkpoint of ``step`` count; it is written after every file."""
    return f"{checkpoint_prefix(job_id, step)}{COMMIT_MARKER}"


def part_marker_key(job_id: str, step: int, node: int) -> str:
    """Key of the marker saying node ``node`` of a group uploaded its part of the checkpoint of ``step``."""
    return f"{checkpoint_prefix(job_id, step)}{PART_MARKERS}/node-{node:03d}.json"


def local_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """Complete checkpoint directories under ``directory``, oldest first.

    A checkpoint is complete once it has been renamed into place under its final name; temporary directories
    (names starting with ``.``) and anything not named like :func:`checkpoint_name` are ignored.

    Parameters
    ----------
    directory
        The local checkpoint directory (``$SPOTRUN_CHECKPOINT_DIR``). A missing directory has no checkpoints.

    Returns
    -------
    list[tuple[int, Path]]
        ``(step, path)`` pairs sorted by step.
    """
    found = []
    try:
        entries = list(directory.iterdir())
    except FileNotFoundError:
        return []
    for entry in entries:
        step = checkpoint_step(entry.name)
        if step is not None and entry.is_dir():
            found.append((step, entry))
    return sorted(found)


def output_prefix(job_id: str) -> str:
    """Key prefix of the job's output directory, uploaded when training succeeds."""
    return f"{job_prefix(job_id)}output/"


def output_list_key(job_id: str, attempt: int) -> str:
    """Key of the JSON list of every file one attempt uploaded as output (kept in S3, out of the workflow state)."""
    return f"{job_prefix(job_id)}agent/attempt-{attempt:03d}-outputs.json"


def log_key(job_id: str, attempt: int) -> str:
    """Key of the training log of one attempt."""
    return f"{job_prefix(job_id)}logs/attempt-{attempt:03d}.log"


# The live copy of the training logs: one CloudWatch Logs group per deployment, named after its jobs bucket (unique
# per deployment, known to the agent, the API and the IAM policies without another setting), and one stream per
# attempt. Group names take letters, digits and ``_-/.#``, which a bucket name's characters are; stream names
# take anything but ``:`` and ``*``
# (https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_CreateLogGroup.html).
LOG_GROUP_PREFIX = "/spotrun/"


def log_group(jobs_bucket: str) -> str:
    """Name of the deployment's CloudWatch Logs group of training logs (``/spotrun/<jobs-bucket>``)."""
    return f"{LOG_GROUP_PREFIX}{jobs_bucket}"


def log_stream(job_id: str, attempt: int) -> str:
    """Name of one attempt's log stream in :func:`log_group` (``<job-id>/attempt-001``)."""
    return f"{job_id}/attempt-{attempt:03d}"


def progress_key(job_id: str, attempt: int) -> str:
    """Key of the latest step one attempt's training reached: ``{"step": n, "updated_at": "<ISO 8601>"}``."""
    return f"{job_prefix(job_id)}progress/attempt-{attempt:03d}.json"


_TELEMETRY_KEY = re.compile(
    r"/telemetry/attempt-(?P<attempt>\d{3,})/node-(?P<node>\d+)/(?P<part>\d{6,})\.jsonl$"
)


def telemetry_prefix(job_id: str) -> str:
    """Prefix of a job's telemetry: its training metrics and GPU readings, as the agents shipped them."""
    return f"{job_prefix(job_id)}telemetry/"


def telemetry_key(job_id: str, attempt: int, node: int, part: int) -> str:
    """Key of one part of one node's telemetry in one attempt: JSON lines (:mod:`spotrun.model.job.telemetry`).

    An agent never rewrites a part: each flush puts the next one, so a reader lists the prefix and reads them all.
    """
    return f"{telemetry_prefix(job_id)}attempt-{attempt:03d}/node-{node}/{part:06d}.jsonl"


def parse_telemetry_key(key: str) -> tuple[int, int, int] | None:
    """``(attempt, node, part)`` of a :func:`telemetry_key`; None when ``key`` is not one."""
    match = _TELEMETRY_KEY.search(key)
    if match is None:
        return None
    return int(match["attempt"]), int(match["node"]), int(match["part"])


class NvmeLayout:
    """Directories of one job on the instance's NVMe (RAID 0 volume, or a plain directory locally).

    Raises
    ------
    ValueError
        When ``job_id`` is not one (:func:`check_job_id`): the agent validates its command first, and this is
        the second wall, so that no directory is ever made from an id such as ``../../x``.
    """

    def __init__(self, nvme_root: Path, job_id: str):
        self.root = nvme_root / "spotrun" / check_job_id(job_id)

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def code_dir(self) -> Path:
        return self.root / "code"

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / "checkpoints"

    @property
    def output_dir(self) -> Path:
        return self.root / "output"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    @property
    def runtime_dir(self) -> Path:
        """Put first on the training command's PYTHONPATH: holds the stdlib-only ``spotrun.training``."""
        return self.root / "runtime"

    def log_file(self, attempt: int) -> Path:
        """Local log of one attempt's training command (every restart appends to it)."""
        return self.log_dir / f"attempt-{attempt:03d}.log"

    def progress_file(self, attempt: int) -> Path:
        """Where the training script writes the latest step it reached (``SPOTRUN_PROGRESS_FILE``)."""
        return self.runtime_dir / f"progress-attempt-{attempt:03d}"

    def checkpoint_interval_file(self, attempt: int) -> Path:
        """The agent's checkpoint interval for ``interval_steps: auto`` (``SPOTRUN_CHECKPOINT_INTERVAL_FILE``)."""
        return self.runtime_dir / f"checkpoint-interval-attempt-{attempt:03d}"

    def supervisor_pid_file(self, attempt: int) -> Path:
        """Names the agent process supervising one attempt's training, while it runs (see ``notify``)."""
        return self.runtime_dir / f"supervisor-attempt-{attempt:03d}.pid"

    def create(self) -> None:
        """Create every directory, mode :data:`DIRECTORY_MODE` (narrowed again if it already existed wider).

        The mode is given explicitly, under a umask of 077, so that neither a permissive umask nor a directory
        left by an earlier run leaves a job's files open to other users. Raises ``ValueError`` when one of
        them is a symbolic link.
        """
        directories = (
            self.data_dir,
            self.code_dir,
            self.checkpoint_dir,
            self.output_dir,
            self.log_dir,
            self.runtime_dir,
        )
        previous = os.umask(0o077)
        try:
            for directory in (self.root.parent, self.root, *directories):
                directory.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
                if directory.is_symlink():
                    # Left by an earlier run's training code: the agent would write through it, out of the job.
                    raise ValueError(f"{directory} is a symbolic link, not the job's directory")
                directory.chmod(DIRECTORY_MODE)
        finally:
            os.umask(previous)

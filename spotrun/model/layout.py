"""Where spotrun's things live: keys in the jobs and archive buckets, the tags on its instances, and the
directories on the instance's NVMe.

One module so that the control plane, the agent, the CDK app (its IAM grants and S3 rules), the emulator and
the tests agree on every path and tag. Standard library only: it is copied onto instances with
``spotrun.training``.
"""

from __future__ import annotations

from pathlib import Path

# The jobs bucket: users drop manifests under MANIFEST_PREFIX; everything a job keeps is under JOBS_PREFIX;
# the manifests of schedules are under SCHEDULES_PREFIX.
MANIFEST_PREFIX = "manifests/"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
REJECTION_SUFFIX = ".rejected.json"  # the report beside a dropped manifest that was refused
JOBS_PREFIX = "jobs/"
SCHEDULES_PREFIX = "schedules/"

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

CHECKPOINT_DIR_PREFIX = "step-"
COMMIT_MARKER = "_COMMITTED.json"
# Anything in the local checkpoint directory whose name starts with this is work in progress (a checkpoint
# being written by spotrun.training, or being restored by the agent) and is never read or uploaded.
TEMP_PREFIX = "."


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


def job_prefix(job_id: str) -> str:
    """Key prefix of everything a job keeps in the jobs bucket."""
    return f"{JOBS_PREFIX}{job_id}/"


def agent_command_key(job_id: str, attempt: int, step: str) -> str:
    """Key of the command document the agent reads for one step of one attempt."""
    return f"{job_prefix(job_id)}agent/attempt-{attempt:03d}-{step}.json"


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


def progress_key(job_id: str, attempt: int) -> str:
    """Key of the latest step one attempt's training reached: ``{"step": n, "updated_at": "<ISO 8601>"}``."""
    return f"{job_prefix(job_id)}progress/attempt-{attempt:03d}.json"


class NvmeLayout:
    """Directories of one job on the instance's NVMe (RAID 0 volume, or a plain directory locally)."""

    def __init__(self, nvme_root: Path, job_id: str):
        self.root = nvme_root / "spotrun" / job_id

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

    def supervisor_pid_file(self, attempt: int) -> Path:
        """Names the agent process supervising one attempt's training, while it runs (see ``notify``)."""
        return self.runtime_dir / f"supervisor-attempt-{attempt:03d}.pid"

    def create(self) -> None:
        """Create every directory."""
        directories = (
            self.data_dir,
            self.code_dir,
            self.checkpoint_dir,
            self.output_dir,
            self.log_dir,
            self.runtime_dir,
        )
        for directory in directories:
            directory.mkdir(parents=True, exist_ok=True)

"""Where a job's things live: keys in the jobs bucket and directories on the instance's NVMe.

One module so that the control plane, the agent and the tests agree on every path.
"""

from __future__ import annotations

from pathlib import Path

CHECKPOINT_DIR_PREFIX = "step-"
COMMIT_MARKER = "_COMMITTED.json"


def job_prefix(job_id: str) -> str:
    """Key prefix of everything a job keeps in the jobs bucket."""
    return f"jobs/{job_id}/"


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


def output_prefix(job_id: str) -> str:
    """Key prefix of the job's output directory, uploaded when training succeeds."""
    return f"{job_prefix(job_id)}output/"


def log_key(job_id: str, attempt: int) -> str:
    """Key of the training log of one attempt."""
    return f"{job_prefix(job_id)}logs/attempt-{attempt:03d}.log"


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

    def create(self) -> None:
        """Create every directory."""
        for directory in (self.data_dir, self.code_dir, self.checkpoint_dir, self.output_dir, self.log_dir):
            directory.mkdir(parents=True, exist_ok=True)

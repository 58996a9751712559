"""How far training got: the step the script last reported, read from its progress file and put in S3.

The script writes the step (``spotrun.training.Run.report_step``) to ``$SPOTRUN_PROGRESS_FILE``, a small text
file replaced atomically. The agent reads it every poll and, when it changed, puts
``{"step": n, "updated_at": "<ISO 8601>"}`` at :func:`spotrun.model.layout.progress_key`, so that the control plane can
tell how much work an interruption lost even when the instance dies before the agent can report.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from spotrun.model import layout

logger = logging.getLogger(__name__)


class Progress(NamedTuple):
    """What a progress file says: the step, when it was written, and the last save's duration (if any)."""

    step: int
    updated_at: datetime
    save_seconds: float | None


def read_progress(path: Path) -> Progress | None:
    """The step in a progress file, when it was written and the last save's duration; None when there is none.

    Parameters
    ----------
    path
        The progress file (:class:`spotrun.training.files.ProgressFile`): the step on the first line, then
        ``save_seconds=<s>`` once a checkpoint was saved.

    Returns
    -------
    Progress or None
        The step, the file's modification time in UTC, and the save's seconds; None when the file is missing
        or its first line is not a step.
    """
    try:
        written = path.stat().st_mtime
        lines = path.read_text().split()
    except OSError:
        return None
    if not lines or not lines[0].isdigit():
        return None
    save_seconds = None
    for line in lines[1:]:
        name, _, value = line.partition("=")
        if name == "save_seconds":
            with contextlib.suppress(ValueError):
                save_seconds = float(value)
    if save_seconds is not None and not (0 <= save_seconds < math.inf):
        save_seconds = None
    return Progress(int(lines[0]), datetime.fromtimestamp(written, UTC), save_seconds)


def progress_document(step: int, updated_at: datetime) -> dict[str, Any]:
    """The JSON document put at the progress key."""
    stamp = updated_at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {"step": step, "updated_at": stamp}


class ProgressPublisher:
    """Reads one attempt's progress file and uploads the step when it changed.

    Call :meth:`publish_quietly` once per poll (a :class:`~spotrun.agent.periodic.Ticker`), and once more when
    training ended.

    Parameters
    ----------
    s3
        A boto3 S3 client.
    bucket
        The jobs bucket.
    job_id, attempt
        Whose progress it is.
    path
        The progress file (``SPOTRUN_PROGRESS_FILE`` of the training command).
    """

    def __init__(self, s3: Any, bucket: str, job_id: str, attempt: int, path: Path):
        self.s3 = s3
        self.bucket = bucket
        self.key = layout.progress_key(job_id, attempt)
        self.path = path
        self._last_step: int | None = None
        self._save_seconds: float | None = None
        self._uploaded: int | None = None
        self._lock = threading.Lock()

    @property
    def last_step(self) -> int | None:
        """The last step read from the file (uploaded or not), None before the script reported one."""
        return self._last_step

    @property
    def save_seconds(self) -> float | None:
        """How long the script's last checkpoint save took, as its progress file says; None before one."""
        return self._save_seconds

    def publish(self) -> bool:
        """Read the file; upload its step when it differs from the last one uploaded.

        Returns
        -------
        bool
            True when a document was uploaded.
        """
        with self._lock:
            found = read_progress(self.path)
            if found is None:
                return False
            step, updated_at, save_seconds = found
            self._last_step = step
            if save_seconds is not None:
                self._save_seconds = save_seconds
            if step == self._uploaded:
                return False
            body = json.dumps(progress_document(step, updated_at)).encode()
            self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=body, ContentType="application/json")
            self._uploaded = step
            return True

    def publish_quietly(self) -> None:
        """:meth:`publish`, logging instead of raising (the next poll tries again)."""
        try:
            self.publish()
        except Exception as exc:
            logger.warning("could not upload the training progress: %s", exc)

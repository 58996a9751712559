"""The second way a spot notice reaches a running train step: from another agent process, by a signal.

While a ``train`` step runs, its agent process keeps a pid file in the job's runtime directory
(:meth:`spotrun.model.layout.NvmeLayout.supervisor_pid_file`: ``{"pid", "start_time", "job_id", "attempt"}``) and
handles :data:`NOTICE_SIGNAL`. ``spotrun-agent run`` with a ``notice`` command (sent through SSM by the
control plane's EC2 interruption-warning handler) reads that file, checks that the process is still the one
that wrote it (its start time, so that a recycled pid is never signalled) and sends the signal. The handler
records an interruption notice with the step's :class:`~spotrun.agent.supervision.spot_notices.NoticeWatcher`, where the
first notice wins: a notice the IMDS watch already acted on starts nothing more.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Literal

from spotrun.agent.supervision.spot_notices import Notice, NoticeWatcher

logger = logging.getLogger(__name__)

NOTICE_SIGNAL = signal.SIGUSR1
NOTICE_SOURCE = "notice sent through SSM"

DeliveryOutcome = Literal["delivered", "no_supervisor"]

# The watcher of the train step this process runs, if any. Read by the signal handler, so plain assignment.
_target: NoticeWatcher | None = None


def process_start_time(pid: int) -> int | None:
    """When a process started (clock ticks since boot, ``/proc/<pid>/stat``); None when unknown or gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return int(fields[19])  # field 22 of stat; the split starts at field 3
    except (IndexError, ValueError):
        return None


def _on_notice_signal(signum: int, frame: FrameType | None) -> None:
    target = _target
    if target is None:
        logger.info("spot notice received, but no train step runs in this process: ignored")
        return
    if not target.interrupt(Notice("interruption", NOTICE_SOURCE)):
        earlier = target.interruption()
        logger.info(
            "spot notice received through SSM; already handling %s", earlier.describe() if earlier else "one"
        )


def install_notice_handler() -> bool:
    """Handle :data:`NOTICE_SIGNAL` in this process (it would end it otherwise); False off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return False
    signal.signal(NOTICE_SIGNAL, _on_notice_signal)
    return True


class NoticeChannel:
    """Context manager of a train step: its pid file exists, and notices reach ``watcher``, while it is open.

    Parameters
    ----------
    pid_file
        :meth:`spotrun.model.layout.NvmeLayout.supervisor_pid_file` of the job and attempt.
    watcher
        The step's notice watcher.
    job_id, attempt
        Recorded in the pid file.
    """

    def __init__(self, pid_file: Path, watcher: NoticeWatcher, job_id: str, attempt: int):
        self.pid_file = pid_file
        self.watcher = watcher
        self.job_id = job_id
        self.attempt = attempt
        self._open = False

    def __enter__(self) -> NoticeChannel:
        global _target
        if not install_notice_handler():
            logger.warning("not in the main thread: notices sent through SSM cannot reach this train step")
            return self
        _target = self.watcher
        pid = os.getpid()
        document = {
            "pid": pid,
            "start_time": process_start_time(pid),
            "job_id": self.job_id,
            "attempt": self.attempt,
        }
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.pid_file.with_name(f".{self.pid_file.name}.{pid}.tmp")
        temporary.write_text(json.dumps(document))
        temporary.replace(self.pid_file)
        self._open = True
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        global _target
        if not self._open:
            return
        # The file goes first; the handler stays installed, so a late signal is logged, never fatal.
        if _read_pid_file(self.pid_file).get("pid") == os.getpid():
            self.pid_file.unlink(missing_ok=True)
        if _target is self.watcher:
            _target = None
        self._open = False


def _read_pid_file(path: Path) -> dict[str, object]:
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def running_supervisor(pid_file: Path) -> int | None:
    """The pid of the agent process the pid file names, if it still runs; None when absent or stale."""
    document = _read_pid_file(pid_file)
    pid = document.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # it exists, owned by someone else: the start time decides
    recorded = document.get("start_time")
    if recorded is not None and process_start_time(pid) != recorded:
        return None  # the pid now belongs to another process
    return pid


def deliver_notice(pid_file: Path) -> tuple[DeliveryOutcome, int | None]:
    """Send :data:`NOTICE_SIGNAL` to the agent process named by ``pid_file``, if it runs.

    Returns
    -------
    tuple
        ``("delivered", pid)``, or ``("no_supervisor", None)`` when no such process runs.

    Raises
    ------
    OSError
        When the process exists but cannot be signalled.
    """
    pid = running_supervisor(pid_file)
    if pid is None:
        return "no_supervisor", None
    try:
        os.kill(pid, NOTICE_SIGNAL)
    except ProcessLookupError:  # it ended in between
        return "no_supervisor", None
    return "delivered", pid

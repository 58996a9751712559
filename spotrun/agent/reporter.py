"""How the agent answers the workflow: a small port, its Step Functions adapter, and an in-memory fake.

The task token lives only inside the adapter. Nothing here logs it, and errors from Step Functions are
re-raised with their error code only, because an AWS error message may quote the token back.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from spotrun.model.command import FailureCause

logger = logging.getLogger(__name__)

# Step Functions limits: error <= 256 characters, cause <= 32768, output <= 256 KiB.
MAX_ERROR_CHARS = 256
MAX_CAUSE_CHARS = 32768
# What Step Functions answers once it no longer waits for the task: nothing the agent does can matter then.
ABANDONED_CODES = frozenset({"TaskTimedOut", "TaskDoesNotExist", "InvalidToken"})


class ReportError(RuntimeError):
    """Step Functions refused or could not take a report (the message carries the error code only)."""


class TaskAbandonedError(ReportError):
    """The workflow no longer waits for this task: it timed out, was stopped, or already has an answer."""


class WorkflowReporter(Protocol):
    """What the agent tells the workflow about the task it is running."""

    def heartbeat(self) -> None:
        """Say the task is alive; raises :class:`TaskAbandonedError` when the workflow gave up on it."""

    def succeed(self, output: BaseModel) -> None:
        """Report success with a JSON output."""

    def fail(self, error: str, cause: FailureCause) -> None:
        """Report failure with an error name the workflow routes on, and a JSON cause."""


def _suffix_within(text: str, budget: int) -> str:
    """The longest end of ``text`` whose JSON-escaped form takes at most ``budget`` characters."""
    used = 0
    for index in range(len(text) - 1, -1, -1):
        used += len(json.dumps(text[index])) - 2  # a newline costs 2 ("\\n"), a quote 2, most characters 1
        if used > budget:
            return text[index + 1 :]
    return text


def cause_json(cause: FailureCause, limit: int = MAX_CAUSE_CHARS) -> str:
    """Serialize a cause, keeping only as much of the end of its log tail (then of its message) as fits.

    Parameters
    ----------
    cause
        The failure cause.
    limit
        Maximum length of the JSON text.

    Returns
    -------
    str
        The JSON text.
    """
    text = cause.model_dump_json(exclude_none=True)
    if len(text) <= limit:
        return text
    if cause.log_tail:
        without_tail = len(cause.model_copy(update={"log_tail": ""}).model_dump_json(exclude_none=True))
        tail = _suffix_within(cause.log_tail, max(0, limit - without_tail))
        cause = cause.model_copy(update={"log_tail": tail or None})
        text = cause.model_dump_json(exclude_none=True)
    if len(text) > limit:
        without_message = len(cause.model_copy(update={"message": ""}).model_dump_json(exclude_none=True))
        message = cause.message[: max(0, limit - without_message)]
        while len(cause.model_copy(update={"message": message}).model_dump_json(exclude_none=True)) > limit:
            message = message[
                : len(message) // 2
            ]  # escapes made it longer than it looked; halve until it fits
        text = cause.model_copy(update={"message": message}).model_dump_json(exclude_none=True)
    return text


class StepFunctionsReporter:
    """:class:`WorkflowReporter` on the Step Functions task-token API.

    Parameters
    ----------
    client
        A boto3 ``stepfunctions`` client.
    task_token
        The token of the task the agent answers.
    """

    def __init__(self, client: Any, task_token: str):
        self._client = client
        self._token = task_token

    def __repr__(self) -> str:
        return "StepFunctionsReporter(task_token=<hidden>)"

    def _call(self, operation: str, **arguments: Any) -> None:
        try:
            getattr(self._client, operation)(taskToken=self._token, **arguments)
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__)
            error_type = TaskAbandonedError if code in ABANDONED_CODES else ReportError
            # "from None": the original exception's message may contain the token.
            raise error_type(f"{operation} failed: {code}") from None

    def heartbeat(self) -> None:
        """Send ``SendTaskHeartbeat``."""
        self._call("send_task_heartbeat")

    def succeed(self, output: BaseModel) -> None:
        """Send ``SendTaskSuccess`` with ``output`` as JSON."""
        self._call("send_task_success", output=output.model_dump_json())

    def fail(self, error: str, cause: FailureCause) -> None:
        """Send ``SendTaskFailure``."""
        self._call("send_task_failure", error=error[:MAX_ERROR_CHARS], cause=cause_json(cause))


@dataclass
class RecordingReporter:
    """In-memory :class:`WorkflowReporter` for tests and dry runs; thread-safe.

    Attributes
    ----------
    heartbeats
        Heartbeats received.
    success
        The output of the success report, as a JSON-compatible dict.
    failure
        ``(error, cause)`` of the failure report.
    abandoned
        When set, :meth:`heartbeat` raises :class:`TaskAbandonedError` (the workflow gave up).
    """

    heartbeats: int = 0
    success: dict[str, Any] | None = None
    failure: tuple[str, FailureCause] | None = None
    abandoned: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)

    def heartbeat(self) -> None:
        """Count a heartbeat, or raise :class:`TaskAbandonedError` when :attr:`abandoned`."""
        with self._lock:
            if self.abandoned:
                raise TaskAbandonedError("send_task_heartbeat failed: TaskTimedOut")
            self.heartbeats += 1

    def succeed(self, output: BaseModel) -> None:
        """Record a success (a second report is refused, as Step Functions would)."""
        with self._lock:
            self._refuse_second_report()
            self.success = json.loads(output.model_dump_json())
            self._done.set()

    def fail(self, error: str, cause: FailureCause) -> None:
        """Record a failure (a second report is refused, as Step Functions would)."""
        with self._lock:
            self._refuse_second_report()
            self.failure = (error, FailureCause.model_validate_json(cause_json(cause)))
            self._done.set()

    def _refuse_second_report(self) -> None:
        if self.success is not None or self.failure is not None:
            raise TaskAbandonedError("the task already has a result: TaskDoesNotExist")

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until a success or failure was reported."""
        return self._done.wait(timeout)

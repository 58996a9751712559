"""How the agent answers the workflow: a small port, its adapter on the API's agent route, and an in-memory fake.

The instance never holds a task token. :class:`ApiReporter` posts each report to the deployment's agent route
(``POST /agent/reports``), signed with SigV4 for ``execute-api`` with the instance's own role credentials; the
API function checks that the signing instance runs the job's open attempt and answers Step Functions with the
token it keeps in the job record (:mod:`spotrun.control.agent_reports`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel

from spotrun.model.agent_protocol.command import MAX_CAUSE_CHARS, MAX_ERROR_CHARS, FailureCause
from spotrun.model.job.attempt import CheckpointIntervalUsed
from spotrun.model.job.telemetry import GpuLine

logger = logging.getLogger(__name__)

JSON = "application/json"


class ReportError(RuntimeError):
    """The control plane refused or could not take a report."""


class TaskAbandonedError(ReportError):
    """The workflow no longer waits for this task: it timed out, was stopped, or already has an answer."""


class WorkflowReporter(Protocol):
    """What the agent tells the workflow about the task it is running."""

    def heartbeat(
        self, checkpoint_interval: CheckpointIntervalUsed | None = None, gpu: GpuLine | None = None
    ) -> None:
        """Say the task is alive (with the ``auto`` checkpoint interval in force and the node's latest GPU
        sample, for the job's record).

        Raises :class:`TaskAbandonedError` when the workflow gave up on the task.
        """

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


def signed_post(url: str, region: str, credentials: Any, body: bytes) -> urllib.request.Request:
    """A JSON ``POST`` of ``body`` to ``url``, signed with SigV4 for ``execute-api`` with ``credentials``.

    The caller checks the scheme first (only http(s) URLs of the API are posted to).
    """
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    request = AWSRequest(method="POST", url=url, data=body, headers={"Content-Type": JSON})
    SigV4Auth(credentials, "execute-api", region).add_auth(request)
    return urllib.request.Request(  # noqa: S310 - the caller checked the scheme
        url, data=body, headers=dict(request.headers.items()), method="POST"
    )


# What the route answers when the workflow no longer waits for the step (see functions.api.agent).
ABANDONED_STATUSES = frozenset({409, 410})
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


class ApiReporter:
    """:class:`WorkflowReporter` on the API's agent route, signed with the instance's role credentials.

    Parameters
    ----------
    url
        The route's URL (``AgentCommand.report_url``).
    region
        The API's region (the SigV4 scope).
    credentials
        Returns the current botocore credentials (the instance role's, refreshed from IMDS by botocore).
    job_id, attempt, step
        What the reports are about.
    attempts
        Tries per report when the route is unreachable or answers 429/5xx.
    backoff_seconds
        Wait before the second try, doubled after each.
    timeout_seconds
        Per request.
    """

    def __init__(
        self,
        url: str,
        region: str,
        credentials: Callable[[], Any],
        *,
        job_id: str,
        attempt: int,
        step: str,
        attempts: int = 5,
        backoff_seconds: float = 0.25,
        timeout_seconds: float = 20.0,
    ):
        self._url = url
        self._region = region
        self._credentials = credentials
        self._about = {"job_id": job_id, "attempt": attempt, "step": step}
        self._attempts = attempts
        self._backoff = backoff_seconds
        self._timeout = timeout_seconds

    def __repr__(self) -> str:
        return f"ApiReporter(url={self._url!r}, {self._about})"

    def _signed(self, body: bytes) -> urllib.request.Request:
        return signed_post(self._url, self._region, self._credentials(), body)

    def _post(self, kind: str, **fields: Any) -> None:
        if not self._url.startswith(("https://", "http://")):
            raise ReportError(f"{kind} not sent: the report URL {self._url!r} is not http(s)")
        body = json.dumps({**self._about, "kind": kind, **fields}).encode()
        problem = "not sent"
        for attempt in range(self._attempts):
            if attempt:
                time.sleep(self._backoff * 2 ** (attempt - 1))
            try:
                with urllib.request.urlopen(self._signed(body), timeout=self._timeout):  # noqa: S310 - the route
                    return
            except urllib.error.HTTPError as exc:
                status = exc.code
                message = error_message(exc)
                if status in ABANDONED_STATUSES:
                    raise TaskAbandonedError(f"{kind} refused ({status}): {message}") from None
                if status not in RETRIED_STATUSES:
                    raise ReportError(f"{kind} refused ({status}): {message}") from None
                problem = f"{status}: {message}"
            except (OSError, ValueError) as exc:  # unreachable, reset, timed out
                problem = f"{type(exc).__name__}: {exc}"
        raise ReportError(f"{kind} not delivered after {self._attempts} tries ({problem})")

    def heartbeat(
        self, checkpoint_interval: CheckpointIntervalUsed | None = None, gpu: GpuLine | None = None
    ) -> None:
        """Post a heartbeat, with the checkpoint interval and the latest GPU sample when there are."""
        fields: dict[str, Any] = {}
        if checkpoint_interval is not None:
            fields["checkpoint_interval"] = checkpoint_interval.model_dump(mode="json")
        if gpu is not None:
            fields["gpu"] = gpu.model_dump(mode="json")
        self._post("heartbeat", **fields)

    def succeed(self, output: BaseModel) -> None:
        """Post the step's success with ``output``."""
        self._post("success", output=json.loads(output.model_dump_json()))

    def fail(self, error: str, cause: FailureCause) -> None:
        """Post the step's failure, the error and the cause cut to Step Functions' limits."""
        self._post("failure", error=error[:MAX_ERROR_CHARS], cause=cause_json(cause))


def error_message(exc: urllib.error.HTTPError) -> str:
    """The ``message`` of an API error answer, cut to 500 characters (empty when there is none)."""
    try:
        return str(json.loads(exc.read() or b"{}").get("message", ""))[:500]
    except (OSError, ValueError, AttributeError):
        return ""


@dataclass
class RecordingReporter:
    """In-memory :class:`WorkflowReporter` for tests and dry runs; thread-safe.

    Attributes
    ----------
    heartbeats
        Heartbeats received.
    checkpoint_interval
        The interval the last heartbeat carried.
    gpu
        The GPU sample the last heartbeat that had one carried.
    success
        The output of the success report, as a JSON-compatible dict.
    failure
        ``(error, cause)`` of the failure report.
    failure_cause
        The failure's JSON cause as sent, with the fields a subclass of :class:`FailureCause` adds.
    abandoned
        When set, :meth:`heartbeat` raises :class:`TaskAbandonedError` (the workflow gave up).
    """

    heartbeats: int = 0
    checkpoint_interval: CheckpointIntervalUsed | None = None
    gpu: GpuLine | None = None
    success: dict[str, Any] | None = None
    failure: tuple[str, FailureCause] | None = None
    failure_cause: dict[str, Any] | None = None
    abandoned: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _done: threading.Event = field(default_factory=threading.Event, repr=False)

    def heartbeat(
        self, checkpoint_interval: CheckpointIntervalUsed | None = None, gpu: GpuLine | None = None
    ) -> None:
        """Count a heartbeat (keeping its interval and GPU sample), or raise :class:`TaskAbandonedError` when
        :attr:`abandoned`."""
        with self._lock:
            if self.abandoned:
                raise TaskAbandonedError("send_task_heartbeat failed: TaskTimedOut")
            self.heartbeats += 1
            if checkpoint_interval is not None:
                self.checkpoint_interval = checkpoint_interval
            if gpu is not None:
                self.gpu = gpu

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
            text = cause_json(cause)
            self.failure = (error, FailureCause.model_validate_json(text))
            self.failure_cause = json.loads(text)
            self._done.set()

    def _refuse_second_report(self) -> None:
        if self.success is not None or self.failure is not None:
            raise TaskAbandonedError("the task already has a result: TaskDoesNotExist")

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until a success or failure was reported."""
        return self._done.wait(timeout)

"""The live copy of the attempt's log: its new lines go to CloudWatch Logs every second or so while it is written.

The S3 upload at the attempt's end (:func:`spotrun.agent.steps.final_outputs.upload_log`) stays the durable
copy; this one is what ``spotrun logs --follow`` reads while the attempt runs, and what is left of an
instance killed without notice (at most the last :data:`DEFAULT_INTERVAL_SECONDS` or so). A background thread
tails the log file by byte offset and ships each complete line as one event of the attempt's stream
(:func:`spotrun.model.layout.log_stream`). Shipping is best effort: a failed call is logged and retried on the
next tick with the same events, never raised into training.

PutLogEvents' limits (https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_PutLogEvents.html):
at most 10,000 events and 1,048,576 bytes per batch, counted as each message's UTF-8 bytes plus 26; each event at
most 256 KB; the events of a batch in chronological order. Each line is stamped when it is read, so the events
are in order by construction.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from spotrun.agent.links import LinkError, open_regular
from spotrun.model import layout

logger = logging.getLogger(__name__)

MAX_BATCH_EVENTS: Final = 10_000
MAX_BATCH_BYTES: Final = 1_048_576
EVENT_OVERHEAD_BYTES: Final = 26
MAX_EVENT_BYTES: Final = 256 * 1024 - EVENT_OVERHEAD_BYTES
DEFAULT_INTERVAL_SECONDS: Final = 1.0
# Read at most this much of the file per tick: a command printing faster than CloudWatch takes catches up later.
MAX_READ_BYTES: Final = 4 * MAX_BATCH_BYTES
# Events kept while CloudWatch refuses them; past this the oldest are dropped (the S3 copy still has them).
MAX_PENDING_EVENTS: Final = 5 * MAX_BATCH_EVENTS

Mask = Callable[[str], str]


def unmasked(text: str) -> str:
    """The identity: the default :data:`Mask` (the secrets' mask replaces it)."""
    return text


def _truncate(message: str) -> str:
    encoded = message.encode()
    if len(encoded) <= MAX_EVENT_BYTES:
        return message
    return encoded[:MAX_EVENT_BYTES].decode(errors="ignore")


def event_size(event: dict[str, Any]) -> int:
    """How much of a batch's 1,048,576 bytes one event takes."""
    return len(str(event["message"]).encode()) + EVENT_OVERHEAD_BYTES


def batches(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``events`` (in time order) cut into PutLogEvents batches within its count and size limits, order kept."""
    found: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    size = 0
    for event in events:
        needed = event_size(event)
        if current and (len(current) >= MAX_BATCH_EVENTS or size + needed > MAX_BATCH_BYTES):
            found.append(current)
            current, size = [], 0
        current.append(event)
        size += needed
    if current:
        found.append(current)
    return found


class LogShipper:
    """Ships the new lines of one log file to one log stream, from a background thread.

    Parameters
    ----------
    logs
        A boto3 CloudWatch Logs client (or a fake with ``create_log_stream`` and ``put_log_events``).
    group, stream
        Where the lines go (:func:`spotrun.model.layout.log_group`, :func:`~spotrun.model.layout.log_stream`).
    path
        The log file. Only what is written after :meth:`start` is shipped: the stage step's shipper sent what
        came before (setup's lines) to the same stream.
    mask
        Applied to every line before it leaves the instance (the secrets' values masked).
    interval_seconds
        Between two shipments.
    clock
        Seconds since the epoch (the events' timestamps).
    """

    def __init__(
        self,
        logs: Any,
        group: str,
        stream: str,
        path: Path,
        *,
        mask: Mask = unmasked,
        interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.time,
    ):
        self._logs = logs
        self.group = group
        self.stream = stream
        self.path = path
        self._mask = mask
        self._interval = interval_seconds
        self._clock = clock
        self._offset = 0
        self._partial = b""
        self._pending: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one shipment at a time: the thread's and the final flush

    def start(self) -> LogShipper:
        """Skip what the file holds now, and ship what follows every ``interval_seconds`` until :meth:`stop`."""
        try:
            self._offset = self.path.stat().st_size
        except OSError:
            self._offset = 0
        self._thread = threading.Thread(target=self._run, name="log-shipper", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread, then ship what is left (the last line too, even without its newline)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.ship(final=True)

    def __enter__(self) -> LogShipper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.ship()

    def ship(self, *, final: bool = False) -> int:
        """Read the file's new lines and send every pending event; returns how many were sent.

        Never raises: a failure is logged, and the events wait for the next call.
        """
        with self._lock:
            try:
                self._read(final)
                return self._send()
            except Exception as exc:  # the live copy only helps a human; training goes on without it
                logger.warning("log shipping to %s failed (retried): %s", self.stream, exc)
                return 0

    def _read(self, final: bool) -> None:
        try:
            with open_regular(self.path) as handle:
                handle.seek(self._offset)
                data = handle.read(MAX_READ_BYTES)
        except FileNotFoundError:
            return
        except LinkError as exc:  # the command may replace its log by a link: its target is never read
            logger.warning("log not shipped: %s", exc)
            return
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if final and self._partial:
            lines.append(self._partial)
            self._partial = b""
        now = int(self._clock() * 1000)
        for line in lines:
            # CloudWatch refuses an empty message: a blank line travels as one space.
            text = self._mask(line.decode(errors="replace").rstrip("\r")) or " "
            self._pending.append({"timestamp": now, "message": _truncate(text)})
        if len(self._pending) > MAX_PENDING_EVENTS:
            dropped = len(self._pending) - MAX_PENDING_EVENTS
            logger.warning("dropped %d unsent log lines of %s (the S3 copy keeps them)", dropped, self.stream)
            del self._pending[:dropped]

    def _send(self) -> int:
        sent = 0
        for batch in batches(list(self._pending)):
            self._put(batch)
            del self._pending[: len(batch)]
            sent += len(batch)
        return sent

    def _put(self, batch: list[dict[str, Any]]) -> None:
        try:
            self._logs.put_log_events(logGroupName=self.group, logStreamName=self.stream, logEvents=batch)
        except Exception as exc:
            if _error_code(exc) != "ResourceNotFoundException":
                raise
            # The control plane creates the stream when it issues the job's credentials, which may not create
            # it; without those (off EC2), or if that failed, the agent's own credentials may.
            self._create_stream()
            self._logs.put_log_events(logGroupName=self.group, logStreamName=self.stream, logEvents=batch)

    def _create_stream(self) -> None:
        try:
            self._logs.create_log_stream(logGroupName=self.group, logStreamName=self.stream)
        except Exception as exc:
            if _error_code(exc) != "ResourceAlreadyExistsException":
                raise


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def live_log(
    logs: Any, jobs_bucket: str, job_id: str, attempt: int, path: Path, *, mask: Mask = unmasked
) -> contextlib.AbstractContextManager[Any]:
    """A running :class:`LogShipper` of one attempt's log for a ``with`` block; nothing when ``logs`` is None.

    Parameters
    ----------
    logs
        The CloudWatch Logs client signed with the job's credentials, or None (no live copy).
    jobs_bucket
        The deployment's jobs bucket, which names its log group (:func:`spotrun.model.layout.log_group`).
    job_id, attempt
        Whose stream (:func:`spotrun.model.layout.log_stream`).
    path
        The attempt's log file.
    mask
        Applied to every line before it is sent.
    """
    if logs is None:
        return contextlib.nullcontext()
    return LogShipper(
        logs, layout.log_group(jobs_bucket), layout.log_stream(job_id, attempt), path, mask=mask
    )

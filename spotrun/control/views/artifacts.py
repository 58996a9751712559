"""What the REST API reads of a job's artifacts: training logs, and archived models restored from Glacier."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Collection
from typing import Final, Literal

from pydantic import ConfigDict, Field

from spotrun.control.ports import LogEvents, Objects
from spotrun.model.base import DeferredModel
from spotrun.model.errors import RequestRejected
from spotrun.model.job.record import Job
from spotrun.model.layout import log_group, log_key, log_stream
from spotrun.model.manifest.schema import split_s3_uri

# Enough for a few thousand lines of tail without reading a whole multi-GB log.
LOG_TAIL_BYTES = 256 * 1024
# Storage classes whose objects must be restored before they can be read; GLACIER_IR reads at once.
ARCHIVED_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})
_EXPIRY: Final = r'expiry-date="([^"]+)"'

# Lines one answer after a cursor holds at most (the tail's maximum): a follower far behind catches up in steps.
MAX_FOLLOW_LINES = 5000
LogSource = Literal["live", "s3", "none"]
RestoreState = Literal["readable", "in-progress", "archived", "missing"]


class AttemptLog(DeferredModel):
    """Lines of one attempt's training log: its tail, or what came after a cursor."""

    attempt: int
    key: str = Field(description="Key of the log in the jobs bucket (uploaded when the attempt ends).")
    stream: str = Field(
        description="The attempt's live log stream in the deployment's CloudWatch Logs group."
    )
    source: LogSource = Field(
        description="live: read from the stream; s3: from the uploaded copy (no stream, or it expired); "
        "none: neither exists (yet)."
    )
    found: bool = Field(description="False when the attempt has not written a log (yet).")
    lines: list[str]
    truncated: bool = Field(description="True when earlier lines were left out.")


class JobLogs(DeferredModel):
    """Training logs of a job, one entry per attempt."""

    job_id: str
    logs: list[AttemptLog]
    next_token: str = Field(
        description="Opaque cursor: pass it back as next_token to get only the lines written since, across "
        "attempts (an answer without new lines gives it back unchanged)."
    )


class ObjectRestore(DeferredModel):
    """Where one archived object stands."""

    uri: str
    storage_class: str
    state: RestoreState = Field(
        description="readable: can be read now; in-progress: a restore runs; archived: no restore asked; "
        "missing: the object is gone."
    )
    expires: str | None = Field(default=None, description="When the restored copy expires (S3's HTTP date).")


class RestoreReport(DeferredModel):
    """Where the job's archived model stands."""

    job_id: str
    readable: bool = Field(description="True when every object can be read now.")
    objects: list[ObjectRestore]


def job_logs(
    job: Job,
    *,
    objects: Objects,
    log_events: LogEvents,
    jobs_bucket: str,
    attempt: int | None,
    tail: int,
    next_token: str | None = None,
) -> JobLogs:
    """The training logs of a job: each attempt's last ``tail`` lines, or the lines after ``next_token``.

    Each attempt's live stream is read (:func:`spotrun.model.layout.log_stream`); when it does not exist (not
    created yet, or past the group's retention) the S3 copy is. The answer's ``next_token`` points after its
    last line; given back, the next answer holds only what was written since: the rest of that attempt's
    stream, then, once the job has a later attempt, that attempt's from its start.

    Parameters
    ----------
    job
        The job.
    objects, log_events
        S3 and CloudWatch Logs.
    jobs_bucket
        The deployment's jobs bucket (which names its log group too).
    attempt
        Only this attempt (a cursor then never moves past it).
    tail
        Lines from the end of each log, without ``next_token``.
    next_token
        A cursor from an earlier answer.

    Raises
    ------
    RequestRejected
        (404) when the job has no attempt ``attempt``; (400) when ``next_token`` is not a cursor of this job's.
    """
    numbers = [a.number for a in job.attempts]
    if attempt is not None:
        if attempt not in numbers:
            raise RequestRejected(
                f"job {job.job_id} has no attempt {attempt} (attempts: {numbers})", status=404
            )
        numbers = [attempt]
    group = log_group(jobs_bucket)
    if next_token is not None:
        return _after(job, numbers, group, log_events, decode_cursor(next_token, attempt))
    read = [_tail(job.job_id, number, group, objects, log_events, jobs_bucket, tail) for number in numbers]
    # Before the first attempt: a follower starts at attempt 1's head.
    last = read[-1][1] if read else LogCursor(a=1, t=None)
    return JobLogs(job_id=job.job_id, logs=[entry for entry, _ in read], next_token=last.encode())


class LogCursor(DeferredModel):
    """Where a reader of a job's logs stands: an attempt, and the stream's token after the last line read."""

    model_config = ConfigDict(frozen=True)

    attempt: int = Field(alias="a", ge=1)
    token: str | None = Field(alias="t", default=None, description="None: from the stream's head.")

    def encode(self) -> str:
        """The cursor as the API gives it: URL-safe base64 of compact JSON."""
        return base64.urlsafe_b64encode(self.model_dump_json(by_alias=True).encode()).decode()


def decode_cursor(text: str, only: int | None = None) -> LogCursor:
    """The cursor ``text`` names; when the reader asks for attempt ``only``, a cursor of that attempt.

    A cursor may name an attempt the job has not started yet (one given before its first attempt): nothing is
    read until it has.

    Raises
    ------
    RequestRejected
        (400) when it is not one :meth:`LogCursor.encode` made, or names another attempt than ``only``.
    """
    try:
        cursor = LogCursor.model_validate_json(base64.urlsafe_b64decode(text.encode()))
    except (ValueError, binascii.Error):
        raise RequestRejected("next_token is not a cursor this API gave", status=400) from None
    if only is not None and cursor.attempt != only:
        raise RequestRejected(f"next_token is a cursor of attempt {cursor.attempt}, not {only}", status=400)
    return cursor


def _entry(job_id: str, number: int, source: LogSource, lines: list[str], truncated: bool) -> AttemptLog:
    return AttemptLog(
        attempt=number,
        key=log_key(job_id, number),
        stream=log_stream(job_id, number),
        source=source,
        found=source != "none",
        lines=lines,
        truncated=truncated,
    )


def _tail(
    job_id: str,
    number: int,
    group: str,
    objects: Objects,
    log_events: LogEvents,
    jobs_bucket: str,
    tail: int,
) -> tuple[AttemptLog, LogCursor]:
    # One more than asked: whether earlier lines exist.
    live = log_events.read(group, log_stream(job_id, number), token=None, limit=tail + 1, from_head=False)
    if live is not None:
        lines, token = live
        return _entry(job_id, number, "live", lines[-tail:], len(lines) > tail), LogCursor(a=number, t=token)
    cursor = LogCursor(a=number, t=None)  # the stream may appear later: a follower reads it from its head
    body = objects.get_tail(jobs_bucket, log_key(job_id, number), LOG_TAIL_BYTES)
    if body is None:
        return _entry(job_id, number, "none", [], False), cursor
    lines = body.decode("utf-8", errors="replace").splitlines()
    if len(body) >= LOG_TAIL_BYTES and lines:
        lines = lines[1:]  # the first line read is probably cut
    truncated = len(lines) > tail or len(body) >= LOG_TAIL_BYTES
    return _entry(job_id, number, "s3", lines[-tail:], truncated), cursor


def _after(job: Job, numbers: list[int], group: str, log_events: LogEvents, cursor: LogCursor) -> JobLogs:
    """What the streams hold after ``cursor``: the rest of its attempt's, then each later attempt's."""
    logs: list[AttemptLog] = []
    budget = MAX_FOLLOW_LINES
    for number in [n for n in numbers if n >= cursor.attempt]:
        token = cursor.token if number == cursor.attempt else None
        lines: list[str] = []
        found = False
        while budget > 0:
            page = log_events.read(
                group, log_stream(job.job_id, number), token=token, limit=min(budget, 1000), from_head=True
            )
            if page is None:
                break
            found = True
            new, following = page
            lines += new
            budget -= len(new)
            if following == token or not new:
                token = following
                break
            token = following
        if found:  # an attempt whose stream does not exist yet is left out until it does
            logs.append(_entry(job.job_id, number, "live", lines, False))
        cursor = LogCursor(a=number, t=token)
        if budget <= 0:
            break  # the rest next time, from this cursor
    return JobLogs(job_id=job.job_id, logs=logs, next_token=cursor.encode())


def _state(uri: str, head: dict[str, str] | None) -> ObjectRestore:
    if head is None:
        return ObjectRestore(uri=uri, storage_class="", state="missing")
    storage_class, restore = head["storage_class"], head["restore"]
    if storage_class not in ARCHIVED_CLASSES:
        return ObjectRestore(uri=uri, storage_class=storage_class, state="readable")
    if 'ongoing-request="true"' in restore:
        return ObjectRestore(uri=uri, storage_class=storage_class, state="in-progress")
    expiry = re.search(_EXPIRY, restore)
    if 'ongoing-request="false"' in restore:
        return ObjectRestore(
            uri=uri,
            storage_class=storage_class,
            state="readable",
            expires=expiry.group(1) if expiry else None,
        )
    return ObjectRestore(uri=uri, storage_class=storage_class, state="archived")


def archived_uris(job: Job, objects: Objects) -> list[str]:
    """Every archived object of the job: from the record, or from the archive's metadata document when the
    record lists only the first :data:`~spotrun.model.job.record.ARCHIVE_OBJECTS_IN_RECORD` of them."""
    total = job.archive_total
    if total is None or total.objects <= len(job.archive):
        return [item.uri for item in job.archive]
    document = json.loads(objects.get_bytes(*split_s3_uri(total.metadata_uri)))
    return [item["uri"] for item in document["objects"]]


def _archived(job: Job, objects: Objects, archive_buckets: Collection[str]) -> list[str]:
    if not job.archive:
        raise RequestRejected(
            f"job {job.job_id} has no archived model (status {job.status.value}): nothing to restore",
            status=409,
        )
    uris = archived_uris(job, objects)
    # Submission admits only granted buckets; one dropped from the deployer's option since is named, never
    # left out of the report (a report without it would call the model readable).
    outside = sorted({split_s3_uri(uri)[0] for uri in uris} - set(archive_buckets))
    if outside:
        raise RequestRejected(
            f"job {job.job_id} is archived in {', '.join(outside)}, which this deployment may no longer "
            f"read (archive buckets: {', '.join(sorted(archive_buckets))}); add it back to the CDK option "
            "archive_buckets, or restore those objects with S3 directly",
            status=409,
        )
    return uris


def restore_status(job: Job, *, objects: Objects, archive_buckets: Collection[str]) -> RestoreReport:
    """Where each object of the job's archived model stands (head_object's storage class and Restore header).

    Parameters
    ----------
    job
        The job.
    objects
        The S3 port.
    archive_buckets
        The buckets this deployment archives to (its own and the deployer's ``archive_buckets``).

    Raises
    ------
    RequestRejected
        (409) when the job has no archived model, or some of it lies in a bucket not in ``archive_buckets``.
    """
    states = [
        _state(uri, objects.head(*split_s3_uri(uri))) for uri in _archived(job, objects, archive_buckets)
    ]
    return RestoreReport(
        job_id=job.job_id, readable=all(s.state == "readable" for s in states), objects=states
    )


def start_restore(
    job: Job, *, objects: Objects, archive_buckets: Collection[str], days: int
) -> RestoreReport:
    """Ask S3 to restore every archived object not yet readable nor being restored; report where they stand.

    Idempotent: objects already readable or in progress are left alone.
    """
    for item in restore_status(job, objects=objects, archive_buckets=archive_buckets).objects:
        if item.state == "archived":
            objects.restore(*split_s3_uri(item.uri), days)
    return restore_status(job, objects=objects, archive_buckets=archive_buckets)

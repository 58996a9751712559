"""What the REST API reads of a job's artifacts: training logs, and archived models restored from Glacier."""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Literal

from pydantic import BaseModel, Field

from spotrun.control.ports import Objects
from spotrun.model.errors import RequestRejected
from spotrun.model.job import Job
from spotrun.model.layout import log_key
from spotrun.model.manifest import split_s3_uri

# Enough for a few thousand lines of tail without reading a whole multi-GB log.
LOG_TAIL_BYTES = 256 * 1024
# Storage classes whose objects must be restored before they can be read; GLACIER_IR reads at once.
ARCHIVED_CLASSES = frozenset({"GLACIER", "DEEP_ARCHIVE"})
_EXPIRY = re.compile(r'expiry-date="([^"]+)"')

RestoreState = Literal["readable", "in-progress", "archived", "missing"]


class AttemptLog(BaseModel):
    """The tail of one attempt's training log."""

    attempt: int
    key: str = Field(description="Key of the log in the jobs bucket.")
    found: bool = Field(description="False when the attempt has not written a log (yet).")
    lines: list[str]
    truncated: bool = Field(description="True when earlier lines were left out.")


class JobLogs(BaseModel):
    """Training logs of a job, one entry per attempt."""

    job_id: str
    logs: list[AttemptLog]


class ObjectRestore(BaseModel):
    """Where one archived object stands."""

    uri: str
    storage_class: str
    state: RestoreState = Field(
        description="readable: can be read now; in-progress: a restore runs; archived: no restore asked; "
        "missing: the object is gone."
    )
    expires: str | None = Field(default=None, description="When the restored copy expires (S3's HTTP date).")


class RestoreReport(BaseModel):
    """Where the job's archived model stands."""

    job_id: str
    readable: bool = Field(description="True when every object can be read now.")
    objects: list[ObjectRestore]


def job_logs(job: Job, *, objects: Objects, jobs_bucket: str, attempt: int | None, tail: int) -> JobLogs:
    """The last ``tail`` lines of the training log of each attempt (or of attempt ``attempt`` only).

    Raises
    ------
    RequestRejected
        (404) when the job has no attempt ``attempt``.
    """
    numbers = [a.number for a in job.attempts]
    if attempt is not None:
        if attempt not in numbers:
            raise RequestRejected(
                f"job {job.job_id} has no attempt {attempt} (attempts: {numbers})", status=404
            )
        numbers = [attempt]
    logs = []
    for number in numbers:
        key = log_key(job.job_id, number)
        body = objects.get_tail(jobs_bucket, key, LOG_TAIL_BYTES)
        if body is None:
            logs.append(AttemptLog(attempt=number, key=key, found=False, lines=[], truncated=False))
            continue
        lines = body.decode("utf-8", errors="replace").splitlines()
        if len(body) >= LOG_TAIL_BYTES and lines:
            lines = lines[1:]  # the first line read is probably cut
        truncated = len(lines) > tail or len(body) >= LOG_TAIL_BYTES
        logs.append(AttemptLog(attempt=number, key=key, found=True, lines=lines[-tail:], truncated=truncated))
    return JobLogs(job_id=job.job_id, logs=logs)


def _state(uri: str, head: dict[str, str] | None) -> ObjectRestore:
    if head is None:
        return ObjectRestore(uri=uri, storage_class="", state="missing")
    storage_class, restore = head["storage_class"], head["restore"]
    if storage_class not in ARCHIVED_CLASSES:
        return ObjectRestore(uri=uri, storage_class=storage_class, state="readable")
    if 'ongoing-request="true"' in restore:
        return ObjectRestore(uri=uri, storage_class=storage_class, state="in-progress")
    expiry = _EXPIRY.search(restore)
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
    record lists only the first :data:`~spotrun.model.job.ARCHIVE_OBJECTS_IN_RECORD` of them."""
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

"""Archiving a trained model to a Glacier storage class, with a readable metadata document beside it."""

from __future__ import annotations

import json
from datetime import datetime

from pydantic import TypeAdapter, ValidationError

from spotrun.control.ports import JobStore, Objects
from spotrun.control.store import update_job
from spotrun.model.agent_protocol.command import OutputList, OutputObject, TrainResult
from spotrun.model.errors import OutputsInvalid
from spotrun.model.job.record import (
    ARCHIVE_OBJECTS_IN_RECORD,
    ArchivedObject,
    ArchiveTotal,
    Job,
    JobStatus,
    transition,
)
from spotrun.model.layout import ARCHIVE_METADATA_NAME, DEFAULT_ARCHIVE_PREFIX
from spotrun.model.manifest.schema import split_s3_uri


def archive_location(job: Job, archive_bucket: str) -> tuple[str, str]:
    """Bucket and key prefix where the job's model is archived: ``<destination>/<job id>/``."""
    destination = job.require_manifest().archive.destination
    bucket, prefix = split_s3_uri(destination) if destination else (archive_bucket, DEFAULT_ARCHIVE_PREFIX)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, f"{prefix}{job.job_id}/"


_OUTPUTS = TypeAdapter(list[OutputObject])


def read_output_list(objects: Objects, jobs_bucket: str, reference: OutputList) -> list[OutputObject]:
    """Read the list of uploaded outputs the agent stored in S3, and check it is the one it reported.

    Raises
    ------
    OutputsInvalid
        When the list is missing, unreadable, or its count or total size differs from the reference.
    """
    try:
        outputs = _OUTPUTS.validate_python(json.loads(objects.get_bytes(jobs_bucket, reference.key)))
    except (ValidationError, ValueError) as exc:
        raise OutputsInvalid(
            f"the output list s3://{jobs_bucket}/{reference.key} is not valid: {exc}"
        ) from exc
    except Exception as exc:  # the port's "no such object" (botocore is not imported here)
        raise OutputsInvalid(
            f"the output list s3://{jobs_bucket}/{reference.key} is not readable: {exc}"
        ) from exc
    total = sum(item.size for item in outputs)
    if (len(outputs), total) != (reference.count, reference.bytes):
        raise OutputsInvalid(
            f"the output list s3://{jobs_bucket}/{reference.key} holds {len(outputs)} files ({total} bytes); "
            f"the agent reported {reference.count} ({reference.bytes} bytes)"
        )
    return outputs


def archive_model(
    *,
    job_id: str,
    trained: TrainResult,
    store: JobStore,
    objects: Objects,
    jobs_bucket: str,
    archive_bucket: str,
    now: datetime,
) -> list[ArchivedObject]:
    """Copy the model's objects into the archive in the manifest's storage class.

    The metadata document (job, manifest, digest, attempts) stays in STANDARD so it can be read without a
    Glacier restore.

    Parameters
    ----------
    job_id
        The job.
    trained
        What the agent reported: where the list of uploaded outputs is, the model's key and digest.
    store, objects
        Ports to the job store and S3.
    jobs_bucket, archive_bucket
        Deployment settings.
    now
        The current time.

    Returns
    -------
    list[ArchivedObject]
        The archived model objects.
    """
    job = update_job(store, job_id, lambda current: transition(current, JobStatus.ARCHIVING, now))
    storage_class = job.require_manifest().archive.storage_class.value
    bucket, prefix = archive_location(job, archive_bucket)
    model_key = trained.model_key.rstrip("/")
    # Keys keep their path below the model's parent, so a model directory stays a directory.
    parent = model_key.rsplit("/", 1)[0] + "/"
    archived = []
    for output in read_output_list(objects, jobs_bucket, trained.outputs):
        if output.key != model_key and not output.key.startswith(model_key + "/"):
            continue
        destination_key = prefix + output.key.removeprefix(parent)
        objects.copy((jobs_bucket, output.key), (bucket, destination_key), storage_class)
        archived.append(
            ArchivedObject(
                uri=f"s3://{bucket}/{destination_key}",
                storage_class=storage_class,
                size=output.size,
                sha256=output.sha256,
            )
        )
    objects.put_json(
        bucket,
        prefix + ARCHIVE_METADATA_NAME,
        {
            "job_id": job.job_id,
            "name": job.name,
            "archived_at": now.isoformat(),
            "model_sha256": trained.model_sha256,
            "objects": [item.model_dump() for item in archived],
            "manifest": None if job.manifest is None else job.manifest.model_dump(mode="json"),
            "attempts": [attempt.model_dump(mode="json") for attempt in job.attempts],
        },
    )
    total = ArchiveTotal(
        objects=len(archived),
        bytes=sum(item.size for item in archived),
        metadata_uri=f"s3://{bucket}/{prefix}{ARCHIVE_METADATA_NAME}",
    )
    update_job(
        store,
        job_id,
        lambda current: current.model_copy(
            update={
                "archive": archived[:ARCHIVE_OBJECTS_IN_RECORD],
                "archive_total": total,
                "model_sha256": trained.model_sha256,
            }
        ),
    )
    return archived

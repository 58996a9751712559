"""Archiving a trained model to a Glacier storage class, with a readable metadata document beside it."""

from __future__ import annotations

from datetime import datetime

from spotrun.agent.command import TrainResult
from spotrun.fleet import manifest_of
from spotrun.job import ArchivedObject, Job, JobStatus, transition
from spotrun.manifest import split_s3_uri
from spotrun.ports import Objects
from spotrun.store import JobStore, update_job

METADATA_NAME = "spotrun-model.json"
DEFAULT_ARCHIVE_PREFIX = "models/"


def archive_location(job: Job, archive_bucket: str) -> tuple[str, str]:
    """Bucket and key prefix where the job's model is archived: ``<destination>/<job id>/``."""
    destination = manifest_of(job).archive.destination
    bucket, prefix = split_s3_uri(destination) if destination else (archive_bucket, DEFAULT_ARCHIVE_PREFIX)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, f"{prefix}{job.job_id}/"


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
        What the agent reported: the uploaded outputs, the model's key and digest.
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
    storage_class = manifest_of(job).archive.storage_class.value
    bucket, prefix = archive_location(job, archive_bucket)
    model_key = trained.model_key.rstrip("/")
    # Keys keep their path below the model's parent, so a model directory stays a directory.
    parent = model_key.rsplit("/", 1)[0] + "/"
    archived = []
    for output in trained.outputs:
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
        prefix + METADATA_NAME,
        {
            "job_id": job.job_id,
            "name": job.name,
            "archived_at": now.isoformat(),
            "model_sha256": trained.model_sha256,
            "objects": [item.model_dump() for item in archived],
            "manifest": job.manifest,
            "attempts": [attempt.model_dump(mode="json") for attempt in job.attempts],
        },
    )
    update_job(
        store,
        job_id,
        lambda current: current.model_copy(
            update={"archive": archived, "model_sha256": trained.model_sha256}
        ),
    )
    return archived

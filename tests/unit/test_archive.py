"""Archiving reads the list of outputs from S3, where the agent left it, and checks it is the one reported."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import pytest

from spotrun.control.archive import archive_model
from spotrun.control.store import update_job
from spotrun.control.views.artifacts import restore_status
from spotrun.model.agent_protocol.command import OutputList, OutputObject, TrainResult
from spotrun.model.errors import OutputsInvalid
from spotrun.model.job.record import ARCHIVE_OBJECTS_IN_RECORD, JobStatus, ManifestSource, new_job, transition
from spotrun.model.manifest.parse import parse_manifest_text
from tests.unit.fakes import FakeObjects, InMemoryJobStore

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
JOBS, ARCHIVE = "jobs-bucket", "archive-bucket"
MANIFEST = parse_manifest_text(
    "name: tiny\nresources: {gpu_names: [t4]}\ntraining: {command: [python, t.py]}\noutputs: {model: model}\n"
)
LIST_KEY = "jobs/tiny-1/agent/attempt-001-outputs.json"


@pytest.fixture
def training_done():
    store, objects = InMemoryJobStore(), FakeObjects()
    store.create(new_job("tiny-1", "tiny", ManifestSource(), MANIFEST.model_dump(mode="json"), T0))
    for status in (JobStatus.ACQUIRING, JobStatus.BOOTING, JobStatus.STAGING, JobStatus.TRAINING):
        update_job(store, "tiny-1", lambda job, status=status: transition(job, status, T0))
    outputs = [
        OutputObject(
            key=f"jobs/tiny-1/output/model/shard-{index:05d}.bin",
            size=index + 1,
            sha256=hashlib.sha256(str(index).encode()).hexdigest(),
        )
        for index in range(5_000)
    ] + [OutputObject(key="jobs/tiny-1/output/metrics.json", size=7, sha256="f" * 64)]
    for item in outputs:
        objects.objects[(JOBS, item.key)] = b"x"
    objects.put_json(JOBS, LIST_KEY, [item.model_dump() for item in outputs])
    return store, objects, outputs


def trained(count: int, size: int) -> TrainResult:
    return TrainResult(
        seconds=1.0,
        outputs=OutputList(key=LIST_KEY, count=count, bytes=size),
        model_key="jobs/tiny-1/output/model/",
        model_sha256="0" * 64,
        log_key="jobs/tiny-1/logs/attempt-001.log",
    )


def archive(store, objects, result):
    return archive_model(
        job_id="tiny-1",
        trained=result,
        store=store,
        objects=objects,
        jobs_bucket=JOBS,
        archive_bucket=ARCHIVE,
        now=T0,
    )


def test_a_model_of_5000_files_is_archived_from_the_list_in_s3(training_done):
    # Given a finished training whose 5,001 outputs are listed in S3 (5,000 of them the model directory)
    store, objects, outputs = training_done
    # When the model is archived from the result that only refers to that list
    archived = archive(store, objects, trained(len(outputs), sum(item.size for item in outputs)))
    # Then every model file is copied, and nothing else
    assert len(archived) == 5_000
    assert (ARCHIVE, "models/tiny-1/model/shard-04999.bin") in objects.objects
    assert (ARCHIVE, "models/tiny-1/metrics.json") not in objects.objects
    metadata = json.loads(objects.objects[(ARCHIVE, "models/tiny-1/spotrun-model.json")])
    assert len(metadata["objects"]) == 5_000


def test_a_list_that_is_not_the_one_reported_fails_the_archive(training_done):
    # Given a result that claims one file fewer than the list in S3 holds
    store, objects, outputs = training_done
    # When the model is archived
    # Then it fails with a named error that says both counts, and archives nothing
    with pytest.raises(OutputsInvalid, match=r"holds 5001 files .* reported 5000"):
        archive(store, objects, trained(len(outputs) - 1, sum(item.size for item in outputs)))
    assert not [key for bucket, key in objects.objects if bucket == ARCHIVE]


def test_a_missing_list_fails_the_archive_with_its_key(training_done):
    # Given a result whose list is not in S3
    store, objects, outputs = training_done
    del objects.objects[(JOBS, LIST_KEY)]
    # When the model is archived
    # Then the error names the list
    with pytest.raises(OutputsInvalid, match=LIST_KEY):
        archive(store, objects, trained(len(outputs), 1))


def test_the_record_of_a_5000_file_model_stays_small_and_restore_still_covers_every_object(training_done):
    # Given a model of 5,000 files archived
    store, objects, outputs = training_done
    archive(store, objects, trained(len(outputs), sum(item.size for item in outputs)))
    job = store.get("tiny-1")
    # When the record is stored and a restore asks where the model stands
    report = restore_status(job, objects=objects, archive_buckets={ARCHIVE})
    # Then the record lists the first objects only, far under DynamoDB's 400 KB item limit, with the total
    assert len(job.archive) == ARCHIVE_OBJECTS_IN_RECORD
    assert job.archive_total.objects == 5_000
    assert len(job.model_dump_json()) < 100_000
    # And the restore reads every object from the archive's metadata document
    assert len(report.objects) == 5_000
    assert report.objects[-1].uri == f"s3://{ARCHIVE}/models/tiny-1/model/shard-04999.bin"

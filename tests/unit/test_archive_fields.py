"""`archive.storage_class`: the model is copied into the archive in the manifest's storage class."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spotrun.control.archive import archive_model
from spotrun.model.agent_protocol.command import OutputList, OutputObject, TrainResult
from spotrun.model.job.record import JobStatus, ManifestSource, new_job, transition
from spotrun.model.manifest.parse import parse_manifest_document
from tests.unit.fakes import FakeObjects, InMemoryJobStore

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
MODEL_KEY = "jobs/tiny-1/output/model.npy"
LIST_KEY = "jobs/tiny-1/agent/attempt-001-outputs.json"


class _ClassRecordingObjects(FakeObjects):
    def __init__(self) -> None:
        super().__init__()
        self.copies: list[tuple[str, str]] = []

    def copy(self, source: tuple[str, str], destination: tuple[str, str], storage_class: str) -> None:
        super().copy(source, destination, storage_class)
        self.copies.append((destination[1], storage_class))


@pytest.mark.parametrize("storage_class", ["DEEP_ARCHIVE", "GLACIER_IR", "GLACIER"])
def test_the_model_is_archived_in_the_manifests_storage_class(storage_class):
    # Given a trained job whose manifest asks for a storage class
    manifest = parse_manifest_document(
        {
            "name": "tiny",
            "training": {"command": ["python", "train.py"]},
            "outputs": {"model": "model.npy"},
            "archive": {"storage_class": storage_class},
        }
    )
    job = new_job(
        "tiny-1", "tiny", ManifestSource(bucket="b", key="k", etag="e"), manifest.model_dump(mode="json"), T0
    )
    for status in (JobStatus.ACQUIRING, JobStatus.BOOTING, JobStatus.STAGING, JobStatus.TRAINING):
        job = transition(job, status, T0)
    store = InMemoryJobStore()
    store.create(job)
    objects = _ClassRecordingObjects()
    objects.objects[("jobs", MODEL_KEY)] = b"weights"
    objects.put_json("jobs", LIST_KEY, [OutputObject(key=MODEL_KEY, size=7, sha256="0" * 64).model_dump()])
    trained = TrainResult(
        seconds=1.0,
        outputs=OutputList(key=LIST_KEY, count=1, bytes=7),
        model_key=MODEL_KEY,
        model_sha256="0" * 64,
        log_key="jobs/tiny-1/logs/attempt-001.log",
    )

    # When it is archived
    archived = archive_model(
        job_id="tiny-1",
        trained=trained,
        store=store,
        objects=objects,
        jobs_bucket="jobs",
        archive_bucket="archive",
        now=T0,
    )

    # Then the model was copied in that class, and the record says so
    assert objects.copies == [("models/tiny-1/model.npy", storage_class)]
    assert [item.storage_class for item in archived] == [storage_class]
    recorded = store.get("tiny-1")
    assert recorded is not None
    assert [item.storage_class for item in recorded.archive] == [storage_class]

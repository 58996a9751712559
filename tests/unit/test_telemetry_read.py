"""Reading a job's telemetry for the API: every part while they fit, an even spread within bounds when not."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from spotrun.control.views.telemetry import job_telemetry
from spotrun.model.errors import JobNotFound
from spotrun.model.job.record import ManifestSource, new_job
from spotrun.model.layout import telemetry_key, telemetry_prefix
from tests.unit.fakes import FakeObjects, InMemoryJobStore

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
JOB_ID = "tiny-0123456789ab"
BUCKET = "jobs-bucket"


class CountingObjects(FakeObjects):
    """The fake S3, counting the objects read."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def get_bytes(self, bucket: str, key: str) -> bytes:
        self.reads.append(key)
        return super().get_bytes(bucket, key)


def world(parts: int, nodes: int = 1, gpus: int = 1) -> tuple[InMemoryJobStore, CountingObjects]:
    """A job whose agents put ``parts`` parts a node, each a GPU sample and a loss, 30 s apart."""
    store, objects = InMemoryJobStore(), CountingObjects()
    store.create(new_job(JOB_ID, "tiny", ManifestSource(), None, T0))
    for node in range(nodes):
        for part in range(1, parts + 1):
            at = (T0 + timedelta(seconds=30 * part)).isoformat()
            readings = [
                {"index": i, "utilization": 90.0, "memory_used_mib": 10.0, "memory_total_mib": 100.0}
                for i in range(gpus)
            ]
            lines = [
                {"kind": "gpu", "at": at, "gpus": readings},
                {"kind": "metrics", "at": at, "step": part, "values": {"loss": 1.0 / part}},
            ]
            body = "\n".join(json.dumps(line) for line in lines).encode()
            objects.objects[(BUCKET, telemetry_key(JOB_ID, 1, node, part))] = body
    return store, objects


def test_every_part_is_read_while_they_fit() -> None:
    # Given a job with 10 parts from each of two nodes
    store, objects = world(parts=10, nodes=2)
    # When its telemetry is read
    answer = job_telemetry(JOB_ID, store=store, objects=objects, jobs_bucket=BUCKET)
    # Then every part was read, each node's loss and GPU series is whole, and nothing says thinned
    assert (answer.parts, answer.parts_read, len(objects.reads)) == (20, 20, 20)
    assert len(answer.metrics["loss"]) == 20
    assert len(answer.gpu) == 20
    assert not answer.thinned
    assert answer.bytes_read == sum(len(body) for body in objects.objects.values())


def test_more_parts_than_the_bound_are_read_as_an_even_spread() -> None:
    # Given a job with 100 parts
    store, objects = world(parts=100)
    # When its telemetry is read with room for 10 parts
    answer = job_telemetry(JOB_ID, store=store, objects=objects, jobs_bucket=BUCKET, max_parts=10)
    # Then 10 parts were read, spread from the first to the last, and the answer says it was thinned
    assert len(objects.reads) == 10
    steps = [point.step for point in answer.metrics["loss"]]
    assert steps[0] == 1
    assert steps[-1] == 100
    assert steps == sorted(steps)
    assert answer.parts == 100
    assert answer.parts_read == 10
    assert answer.thinned


def test_the_bytes_read_stay_within_the_bound() -> None:
    # Given a job with 50 parts of a few hundred bytes each
    store, objects = world(parts=50)
    size = len(objects.objects[(BUCKET, telemetry_key(JOB_ID, 1, 0, 1))])
    # When it is read with room for about 5 parts' bytes
    answer = job_telemetry(
        JOB_ID, store=store, objects=objects, jobs_bucket=BUCKET, max_bytes=5 * size + size // 2
    )
    # Then at most that many bytes were read
    assert answer.bytes_read <= 5 * size + size // 2
    assert 1 <= answer.parts_read <= 5
    assert answer.thinned


def test_the_answer_holds_at_most_its_bound_of_points() -> None:
    # Given 40 parts of a node with 8 GPUs: 320 GPU points and 40 loss points
    store, objects = world(parts=40, gpus=8)
    # When the answer may hold 90 points
    answer = job_telemetry(JOB_ID, store=store, objects=objects, jobs_bucket=BUCKET, max_points=90)
    # Then each of the 9 series keeps its share of 10, the first and the last point kept
    assert len(answer.gpu) + len(answer.metrics["loss"]) == 90
    assert [p.step for p in answer.metrics["loss"]][::9] == [1, 40]
    assert answer.thinned


def test_keys_under_the_prefix_that_are_no_parts_are_ignored() -> None:
    # Given a job with one part and a stray object under its telemetry prefix
    store, objects = world(parts=1)
    objects.objects[(BUCKET, telemetry_prefix(JOB_ID) + "notes.txt")] = b"hello"
    # When its telemetry is read
    answer = job_telemetry(JOB_ID, store=store, objects=objects, jobs_bucket=BUCKET)
    # Then the stray object was not read
    assert answer.parts == 1
    assert objects.reads == [telemetry_key(JOB_ID, 1, 0, 1)]


def test_a_job_without_parts_has_empty_telemetry_and_an_unknown_job_none() -> None:
    # Given a job whose agents put nothing yet
    store, objects = world(parts=0)
    # When its telemetry is read, and an unknown job's
    answer = job_telemetry(JOB_ID, store=store, objects=objects, jobs_bucket=BUCKET)
    # Then the first is empty, the second is not found
    assert (answer.metrics, answer.gpu, answer.parts) == ({}, [], 0)
    with pytest.raises(JobNotFound):
        job_telemetry("nope-0123456789ab", store=store, objects=objects, jobs_bucket=BUCKET)

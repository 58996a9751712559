"""The API's core over fakes: listing pages, cancelling, log tails and restore states."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from spotrun.control.views.artifacts import job_logs, restore_status, start_restore
from spotrun.control.views.jobs import cancel_job, list_jobs
from spotrun.model.errors import InvalidPageToken, JobFinished, RequestRejected
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import ArchivedObject, JobStatus, ManifestSource, new_job, transition
from spotrun.model.layout import log_key
from tests.unit.fakes import FakeCompute, FakeObjects, FakeWorkflows, InMemoryJobStore

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def a_job(job_id: str, name: str = "j", minutes: int = 0, status: JobStatus | None = None):
    job = new_job(job_id, name, ManifestSource(kind="api", key=job_id), None, T0 + timedelta(minutes=minutes))
    return transition(job, status, job.created_at) if status else job


def test_in_memory_listing_pages_newest_first_and_filters():
    # Given five jobs, two of them failed
    store = InMemoryJobStore()
    for n in range(5):
        store.create(
            a_job(f"j-{n}", name="a" if n < 3 else "b", minutes=n, status=JobStatus.FAILED if n % 2 else None)
        )
    # When they are listed two at a time, then filtered
    first = list_jobs(store, status=None, name=None, limit=2, next_token=None)
    second = list_jobs(store, status=None, name=None, limit=2, next_token=first.next_token)
    third = list_jobs(store, status=None, name=None, limit=2, next_token=second.next_token)
    failed_a = list_jobs(store, status=JobStatus.FAILED, name="a", limit=10, next_token=None)
    # Then the pages follow each other, newest first, and the filter keeps only matching jobs
    assert [j.job_id for page in (first, second, third) for j in page.jobs] == [
        "j-4",
        "j-3",
        "j-2",
        "j-1",
        "j-0",
    ]
    assert third.next_token is None
    assert [j.job_id for j in failed_a.jobs] == ["j-1"]


def test_a_token_not_made_by_the_listing_is_refused():
    with pytest.raises(InvalidPageToken, match="next_token"):
        InMemoryJobStore().list_jobs(next_token="!!not-base64!!")


def test_cancel_of_a_submitted_job_stops_it_and_records_cancelled():
    # Given a submitted job with an execution
    store, workflows = InMemoryJobStore(), FakeWorkflows()
    store.create(a_job("j-1").model_copy(update={"execution_arn": "arn:exec:j-1"}))
    # When it is cancelled
    result = cancel_job(
        "j-1", store=store, workflows=workflows, compute=FakeCompute(), now=T0 + timedelta(minutes=5)
    )
    # Then its execution is stopped and it is CANCELLED, with the change on its timeline
    assert workflows.stopped == ["arn:exec:j-1"]
    assert result.job.status == JobStatus.CANCELLED
    assert store.get("j-1").timeline[-1].detail == "cancelled through the API"


def test_cancel_of_a_finished_job_raises_and_stops_nothing():
    store, workflows = InMemoryJobStore(), FakeWorkflows()
    store.create(a_job("j-1", status=JobStatus.FAILED).model_copy(update={"execution_arn": "arn:exec:j-1"}))
    with pytest.raises(JobFinished, match="FAILED"):
        cancel_job("j-1", store=store, workflows=workflows, compute=FakeCompute(), now=T0)
    assert workflows.stopped == []


def _attempt(number: int) -> Attempt:
    return Attempt(
        number=number,
        instance_id=f"i-{number}",
        instance_type="g5.xlarge",
        availability_zone="us-east-1a",
        lifecycle="spot",
        price_per_hour=0.4,
        started_at=T0,
    )


class _NoStreams:
    """CloudWatch Logs without any stream: the S3 copies are read."""

    def read(self, group: str, stream: str, **_: object) -> None:
        return None


def test_logs_give_the_last_lines_of_each_attempt():
    # Given a job with two attempts, the first of which wrote a log
    job = a_job("j-1").model_copy(update={"attempts": [_attempt(1), _attempt(2)]})
    objects = FakeObjects()
    objects.objects[("jobs", log_key("j-1", 1))] = b"one\ntwo\nthree\n"
    # When the last two lines are asked for
    logs = job_logs(job, objects=objects, log_events=_NoStreams(), jobs_bucket="jobs", attempt=None, tail=2)
    # Then attempt 1 gives them and attempt 2 has no log yet; an unknown attempt is refused
    assert [(log.attempt, log.found, log.lines, log.truncated) for log in logs.logs] == [
        (1, True, ["two", "three"], True),
        (2, False, [], False),
    ]
    with pytest.raises(RequestRejected, match="no attempt 3"):
        job_logs(job, objects=objects, log_events=_NoStreams(), jobs_bucket="jobs", attempt=3, tail=2)


def test_restore_states_follow_the_storage_class_and_restore_header():
    # Given archived objects in each situation
    objects = FakeObjects()
    cases = {
        "deep": {"storage_class": "DEEP_ARCHIVE", "restore": ""},
        "running": {"storage_class": "GLACIER", "restore": 'ongoing-request="true"'},
        "done": {
            "storage_class": "GLACIER",
            "restore": 'ongoing-request="false", expiry-date="Fri, 04 Dec 2026 00:00:00 GMT"',
        },
        "instant": {"storage_class": "GLACIER_IR", "restore": ""},
    }
    archive = []
    for key, head in cases.items():
        objects.objects[("archive", key)] = b"x"
        objects.heads[("archive", key)] = head
        archive.append(
            ArchivedObject(uri=f"s3://archive/{key}", storage_class=head["storage_class"], size=1, sha256="0")
        )
    archive.append(ArchivedObject(uri="s3://archive/gone", storage_class="GLACIER", size=1, sha256="0"))
    job = a_job("j-1").model_copy(update={"archive": archive})
    # When the states are reported, and a restore is started
    report = restore_status(job, objects=objects, archive_buckets=("archive",))
    started = start_restore(job, objects=objects, archive_buckets=("archive",), days=3)
    # Then each object says where it stands, and only the one not yet asked for is restored
    assert [o.state for o in report.objects] == ["archived", "in-progress", "readable", "readable", "missing"]
    assert report.objects[2].expires == "Fri, 04 Dec 2026 00:00:00 GMT"
    assert objects.restored == [("archive", "deep", 3)]
    assert started.objects[0].state == "in-progress"
    assert not started.readable

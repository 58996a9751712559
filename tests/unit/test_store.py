import threading
from datetime import UTC, datetime

import pytest

from spotrun.control.store import update_job
from spotrun.model.errors import ConcurrentUpdate, JobNotFound
from spotrun.model.job.record import JobStatus, ManifestSource, new_job, transition
from tests.unit.fakes import InMemoryJobStore

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def a_job(job_id="j-1"):
    return new_job(job_id, "j", ManifestSource(bucket="b", key="k", etag="e"), None, T0)


def test_create_is_refused_for_an_existing_id():
    # Given a store holding a job
    store = InMemoryJobStore()
    assert store.create(a_job())
    # When the same id is created again
    # Then it is refused and the original kept
    assert not store.create(a_job().model_copy(update={"name": "other"}))
    assert store.get("j-1").name == "j"


def test_save_with_a_stale_version_raises():
    # Given two readers of the same job
    store = InMemoryJobStore()
    store.create(a_job())
    first, second = store.get("j-1"), store.get("j-1")
    # When the first writes
    store.save(transition(first, JobStatus.ACQUIRING, T0))
    # Then the second, holding an old version, is refused
    with pytest.raises(ConcurrentUpdate):
        store.save(transition(second, JobStatus.FAILED, T0))


def test_update_job_reapplies_the_change_after_losing_races():
    # Given a job and many threads each appending one timeline entry through update_job
    store = InMemoryJobStore()
    store.create(a_job())

    def add_note(index):
        update_job(
            store,
            "j-1",
            lambda job: job.model_copy(update={"timeline": [*job.timeline, job.timeline[0]]}),
            attempts=200,
        )

    threads = [threading.Thread(target=add_note, args=(index,)) for index in range(16)]
    # When they all run at once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then no update was lost
    job = store.get("j-1")
    assert len(job.timeline) == 17
    assert job.version == 16


def test_update_of_an_unknown_job_raises():
    with pytest.raises(JobNotFound):
        update_job(InMemoryJobStore(), "nope", lambda job: job)


def test_instance_links_find_the_job():
    store = InMemoryJobStore()
    store.link_instance("i-1", "j-1")
    assert store.job_for_instance("i-1") == "j-1"
    assert store.job_for_instance("i-2") is None

"""Changing a job record safely: read, change, write conditionally on the version read, retry on a race.

Every write of a job is conditional on the version read (see :class:`spotrun.control.ports.JobStore`), so two
handlers racing on one job cannot lose an update: the loser reads again and re-applies its change.
"""

from __future__ import annotations

from collections.abc import Callable

from spotrun.control.ports import JobStore
from spotrun.model.errors import ConcurrentUpdate, JobNotFound
from spotrun.model.job.record import Job


def update_job(store: JobStore, job_id: str, change: Callable[[Job], Job], attempts: int = 8) -> Job:
    """Read, change and conditionally write a job, retrying on concurrent updates.

    Parameters
    ----------
    store
        The job store.
    job_id
        The job to change.
    change
        A pure function from the current record to the new one. It may run several times.
    attempts
        How many read-change-write rounds before giving up.

    Returns
    -------
    Job
        The record as written (or as read, when ``change`` returned it unchanged).

    Raises
    ------
    JobNotFound
        When no job has that id.
    ConcurrentUpdate
        When every round lost a race.
    """
    for _ in range(attempts):
        current = store.get(job_id)
        if current is None:
            raise JobNotFound(f"no job {job_id}")
        updated = change(current)
        if updated == current:
            return current
        try:
            return store.save(updated)
        except ConcurrentUpdate:
            continue
    raise ConcurrentUpdate(f"job {job_id}: gave up after {attempts} concurrent updates")

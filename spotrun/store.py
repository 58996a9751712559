"""The job store: a small port, a DynamoDB adapter and an in-memory fake.

One table, two kinds of item:
- ``pk = JOB#<job id>, sk = JOB``: the job document (JSON), with ``status`` and ``name`` beside it;
- ``pk = INSTANCE#<instance id>, sk = INSTANCE``: which job an instance belongs to, for EC2 events.
Every write of a job is conditional on the version read, so two handlers racing on one job cannot lose an
update: the loser reads again and re-applies its change (:func:`update_job`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from spotrun.errors import ConcurrentUpdate, JobNotFound
from spotrun.job import Job

_JOB_SORT_KEY = "JOB"
_INSTANCE_SORT_KEY = "INSTANCE"


class JobStore(Protocol):
    """What the control plane needs from persistence."""

    def create(self, job: Job) -> bool:
        """Store a new job; False (and nothing written) when the id exists already."""
        ...

    def get(self, job_id: str) -> Job | None:
        """The job, or None."""
        ...

    def save(self, job: Job) -> Job:
        """Write ``job`` if the stored version is still ``job.version``; return it with the version bumped.

        Raises ConcurrentUpdate otherwise.
        """
        ...

    def link_instance(self, instance_id: str, job_id: str) -> None:
        """Remember that ``instance_id`` works for ``job_id``."""
        ...

    def job_for_instance(self, instance_id: str) -> str | None:
        """The job an instance works for, or None."""
        ...


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


class DynamoJobStore:
    """:class:`JobStore` on a DynamoDB table (see the module docstring for the item layout)."""

    def __init__(self, table: Any):
        """Wrap a boto3 ``Table`` resource (``boto3.resource("dynamodb").Table(name)``)."""
        self._table = table

    def create(self, job: Job) -> bool:
        client_error = self._table.meta.client.exceptions.ConditionalCheckFailedException
        try:
            self._table.put_item(Item=self._job_item(job), ConditionExpression="attribute_not_exists(pk)")
        except client_error:
            return False
        return True

    def get(self, job_id: str) -> Job | None:
        item = self._table.get_item(
            Key={"pk": f"JOB#{job_id}", "sk": _JOB_SORT_KEY}, ConsistentRead=True
        ).get("Item")
        if item is None:
            return None
        return Job.model_validate_json(item["doc"]).model_copy(update={"version": int(item["version"])})

    def save(self, job: Job) -> Job:
        written = job.model_copy(update={"version": job.version + 1})
        client_error = self._table.meta.client.exceptions.ConditionalCheckFailedException
        try:
            self._table.put_item(
                Item=self._job_item(written),
                ConditionExpression="#v = :expected",
                ExpressionAttributeNames={"#v": "version"},
                ExpressionAttributeValues={":expected": job.version},
            )
        except client_error as exc:
            raise ConcurrentUpdate(f"job {job.job_id} changed since version {job.version}") from exc
        return written

    def link_instance(self, instance_id: str, job_id: str) -> None:
        self._table.put_item(
            Item={"pk": f"INSTANCE#{instance_id}", "sk": _INSTANCE_SORT_KEY, "job_id": job_id}
        )

    def job_for_instance(self, instance_id: str) -> str | None:
        item = self._table.get_item(Key={"pk": f"INSTANCE#{instance_id}", "sk": _INSTANCE_SORT_KEY}).get(
            "Item"
        )
        return None if item is None else str(item["job_id"])

    @staticmethod
    def _job_item(job: Job) -> dict[str, Any]:
        return {
            "pk": f"JOB#{job.job_id}",
            "sk": _JOB_SORT_KEY,
            "job_id": job.job_id,
            "name": job.name,
            "status": job.status.value,
            "created_at": job.created_at.isoformat(),
            "version": job.version,
            "doc": job.model_dump_json(exclude={"version"}),
        }


class InMemoryJobStore:
    """:class:`JobStore` in a dict, with the same conditional semantics; for unit tests."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._instances: dict[str, str] = {}
        self._lock = threading.Lock()

    def create(self, job: Job) -> bool:
        with self._lock:
            if job.job_id in self._jobs:
                return False
            self._jobs[job.job_id] = job
            return True

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def save(self, job: Job) -> Job:
        with self._lock:
            stored = self._jobs.get(job.job_id)
            if stored is None or stored.version != job.version:
                raise ConcurrentUpdate(f"job {job.job_id} changed since version {job.version}")
            written = job.model_copy(update={"version": job.version + 1})
            self._jobs[job.job_id] = written
            return written

    def link_instance(self, instance_id: str, job_id: str) -> None:
        self._instances[instance_id] = job_id

    def job_for_instance(self, instance_id: str) -> str | None:
        return self._instances.get(instance_id)

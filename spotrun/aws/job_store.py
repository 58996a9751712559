"""The job store on DynamoDB: the adapter of :class:`spotrun.control.ports.JobStore`.

One table, two kinds of item:
- ``pk = JOB#<job id>, sk = JOB``: the job document (JSON), with ``status`` and ``name`` beside it;
- ``pk = INSTANCE#<instance id>, sk = INSTANCE``: which job an instance belongs to, for EC2 events.
Every write of a job is conditional on the version read, so two handlers racing on one job cannot lose an
update: the loser reads again and re-applies its change (:func:`spotrun.control.store.update_job`).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from spotrun.control.job_events import publish_deadline_decision, publish_status_change
from spotrun.control.ports import Events
from spotrun.model.errors import ConcurrentUpdate, InvalidPageToken
from spotrun.model.job.record import Job, JobStatus
from spotrun.model.layout import ALL_JOBS_INDEX, BY_STATUS_INDEX, KIND_ATTRIBUTE

_JOB_SORT_KEY = "JOB"
_INSTANCE_SORT_KEY = "INSTANCE"
_QUERY_ROUNDS = 10  # a name filter may skip many items; a page stops after this many reads


def encode_page_token(position: dict[str, str]) -> str:
    """An opaque token for a position in a listing."""
    return base64.urlsafe_b64encode(json.dumps(position, sort_keys=True).encode()).decode()


def decode_page_token(token: str, keys: frozenset[str]) -> dict[str, str]:
    """Read a token made by :func:`encode_page_token`; it must hold exactly ``keys``, all strings.

    Raises
    ------
    InvalidPageToken
        When the token was not made by this listing.
    """
    try:
        position = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError, UnicodeError) as exc:
        raise InvalidPageToken("next_token: not a token returned by this listing") from exc
    if (
        not isinstance(position, dict)
        or set(position) != keys
        or not all(isinstance(value, str) and value for value in position.values())
    ):
        raise InvalidPageToken("next_token: not a token returned by this listing")
    return position


def _newest_choice(doc: str | None) -> str | None:
    """The choice of the newest deadline decision in a stored job document; None without one."""
    if not doc:
        return None
    decisions = json.loads(doc).get("deadline_decisions") or []
    return str(decisions[-1]["choice"]) if decisions else None


class DynamoJobStore:
    """:class:`JobStore` on a DynamoDB table (see the module docstring for the item layout)."""

    def __init__(self, table: Any, events: Events | None = None):
        """Wrap a boto3 ``Table`` resource; publish each status change written on ``events`` when given."""
        self._table = table
        self._events = events

    def create(self, job: Job) -> bool:
        client_error = self._table.meta.client.exceptions.ConditionalCheckFailedException
        try:
            self._table.put_item(Item=self._job_item(job), ConditionExpression="attribute_not_exists(pk)")
        except client_error:
            return False
        if self._events is not None:
            publish_status_change(self._events, job, None)
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
            replaced = self._table.put_item(
                Item=self._job_item(written),
                ConditionExpression="#v = :expected",
                ExpressionAttributeNames={"#v": "version"},
                ExpressionAttributeValues={":expected": job.version},
                ReturnValues="ALL_OLD",  # the status this write replaced, read atomically with the write
            ).get("Attributes", {})
        except client_error as exc:
            raise ConcurrentUpdate(f"job {job.job_id} changed since version {job.version}") from exc
        if self._events is None:
            return written
        previous = replaced.get("status")
        if previous != written.status.value:
            publish_status_change(self._events, written, None if previous is None else JobStatus(previous))
        if written.deadline_decisions:
            # Against the document this write replaced, read atomically with it: a retried write whose first
            # try went through finds the new choice already stored and publishes nothing.
            publish_deadline_decision(self._events, written, _newest_choice(replaced.get("doc")))
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

    def list_jobs(
        self,
        status: JobStatus | None = None,
        name: str | None = None,
        limit: int = 20,
        next_token: str | None = None,
    ) -> tuple[list[Job], str | None]:
        partition = "status" if status is not None else KIND_ATTRIBUTE
        query: dict[str, Any] = {
            "IndexName": BY_STATUS_INDEX if status is not None else ALL_JOBS_INDEX,
            "KeyConditionExpression": "#p = :p",
            "ExpressionAttributeNames": {"#p": partition},
            "ExpressionAttributeValues": {":p": status.value if status is not None else _JOB_SORT_KEY},
            "ScanIndexForward": False,
        }
        if name is not None:
            query["FilterExpression"] = "#n = :n"
            query["ExpressionAttributeNames"]["#n"] = "name"
            query["ExpressionAttributeValues"][":n"] = name
        start = (
            None
            if next_token is None
            else decode_page_token(next_token, frozenset({"pk", "sk", "created_at", partition}))
        )
        jobs: list[Job] = []
        for _ in range(_QUERY_ROUNDS):
            page = self._table.query(
                **query, Limit=limit - len(jobs), **({"ExclusiveStartKey": start} if start else {})
            )
            jobs += [
                Job.model_validate_json(item["doc"]).model_copy(update={"version": int(item["version"])})
                for item in page.get("Items", [])
            ]
            start = page.get("LastEvaluatedKey")
            if start is None or len(jobs) >= limit:
                break
        return jobs, None if start is None else encode_page_token({k: str(v) for k, v in start.items()})

    @staticmethod
    def _job_item(job: Job) -> dict[str, Any]:
        return {
            "pk": f"JOB#{job.job_id}",
            "sk": _JOB_SORT_KEY,
            KIND_ATTRIBUTE: _JOB_SORT_KEY,
            "job_id": job.job_id,
            "name": job.name,
            "status": job.status.value,
            "created_at": job.created_at.isoformat(),
            "version": job.version,
            "doc": job.model_dump_json(exclude={"version"}),
        }

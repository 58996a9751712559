"""The job as plain JSON data: what ``--json`` prints and what the API shows (no rendering library here).

The API function imports this module in Lambda, where only the bundle and the Powertools layer exist, so it
imports nothing beyond pydantic and the core (``tests/infra/test_bundle_imports.py`` checks it).
"""

from __future__ import annotations

from typing import Any

from spotrun.model.capacity.wait import wait_view
from spotrun.model.job.record import Job

# Never shown: the optimistic-locking counter and the Step Functions task token (a secret).
HIDDEN_FIELDS = {"version", "task_token"}


def job_record(job: Job) -> dict[str, Any]:
    """The job as one JSON-able object (what ``--json`` prints), never its task token.

    Parameters
    ----------
    job
        The stored job.

    Returns
    -------
    dict
        The job's fields in JSON mode, less :data:`HIDDEN_FIELDS`, with ``status`` as its value; a wait for capacity
        with its reasons in one line (``capacity_wait.reasons_text``).
    """
    record = job.model_dump(mode="json", exclude=HIDDEN_FIELDS)
    record["status"] = job.status.value
    if job.capacity_wait is not None:
        record["capacity_wait"] = wait_view(job.capacity_wait).model_dump(mode="json")
    return record

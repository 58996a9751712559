"""The job as plain JSON data: what ``--json`` prints and what the API shows (no rendering library here).

The API function imports this module in Lambda, where only the bundle and the Powertools layer exist, so it
imports nothing beyond pydantic and the core (``tests/infra/test_bundle_imports.py`` checks it).
"""

from __future__ import annotations

from typing import Any

from spotrun.model.job import Job

# Never shown: the optimistic-locking counter, an internal timer, and the Step Functions task token (a secret).
HIDDEN_FIELDS = {"version", "waiting_for_capacity_since", "task_token"}


def job_record(job: Job) -> dict[str, Any]:
    """The job as one JSON-able object (what ``--json`` prints), never its task token.

    Parameters
    ----------
    job
        The stored job.

    Returns
    -------
    dict
        The job's fields in JSON mode, less :data:`HIDDEN_FIELDS`, with ``status`` as its value.
    """
    record = job.model_dump(mode="json", exclude=HIDDEN_FIELDS)
    record["status"] = job.status.value
    return record

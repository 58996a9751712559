"""A deadline job whose work is in steps learns it at the agent's train heartbeat: the API's agent route reads
the attempt's progress document, keeps the step on the record, and decides on the work it gives.

The estimate and the rule are tested in tests/unit/test_deadline_work.py and tests/unit/test_deadline_steps.py;
this is the path through the real handlers, against moto.
"""

from __future__ import annotations

import json
from datetime import timedelta

import boto3
import pytest

from spotrun.aws.adapters import job_store
from spotrun.aws.settings import Settings
from spotrun.control.store import update_job
from spotrun.model.job.record import Job, JobStatus, utc_now
from spotrun.model.layout import progress_key
from spotrun.model.manifest.parse import parse_manifest_document
from tests.integration.test_deadline_heartbeat import JOB, heartbeat, notices, start_on_spot

# 1000 steps due 3 h after submission, no hours given: spot at first (the deadline is far, no estimate yet).
MANIFEST = parse_manifest_document(
    {
        "name": "tiny",
        "resources": {"gpu_names": ["t4", "a10g"]},
        "capacity": {"deadline": "3h"},
        "training": {"command": ["python", "train.py"], "total_steps": 1000},
    }
)


@pytest.fixture
def trained_20_minutes(deployment: Settings, lambda_context) -> str:
    """The job acquired (spot), staged and training through the workflow's handlers, all 20 minutes ago."""
    instance_id = start_on_spot(deployment, lambda_context, MANIFEST)
    store = job_store(deployment.jobs_table, deployment.region)
    shift = timedelta(minutes=20)

    def earlier(current: Job) -> Job:
        timeline = [change.model_copy(update={"at": change.at - shift}) for change in current.timeline]
        return current.model_copy(update={"created_at": current.created_at - shift, "timeline": timeline})

    update_job(store, JOB, earlier)
    assert store.get(JOB).status is JobStatus.TRAINING
    return instance_id


def report_step(deployment: Settings, step: int) -> None:
    """The agent's progress document for attempt 1, as it uploads it."""
    stamp = utc_now().isoformat(timespec="milliseconds").replace("+00:00", "Z")
    boto3.client("s3").put_object(
        Bucket=deployment.jobs_bucket,
        Key=progress_key(JOB, 1),
        Body=json.dumps({"step": step, "updated_at": stamp}).encode(),
    )


def test_a_slow_job_learnt_at_the_heartbeat_moves_to_on_demand(
    deployment, trained_20_minutes, lambda_context
):
    # Given the job, 20 minutes into training at step 100 (1000 steps: 3.2 h of work, 2.7 h left)
    instance_id = trained_20_minutes
    report_step(deployment, 100)
    # When its instance reports a train heartbeat
    answer = heartbeat(deployment, instance_id, lambda_context)
    # Then the heartbeat is taken, the step is on the record, and the agent got the notice command
    assert answer["statusCode"] == 200, answer
    job = job_store(deployment.jobs_table, deployment.region).get(JOB)
    assert job.steps_reported is not None
    assert job.steps_reported.steps == 100
    assert [command["InstanceIds"] for command in notices()] == [[instance_id]]
    # and the decisions say what they planned with: none at first, the steps learnt at the move
    first, moved = job.deadline_decisions
    assert (first.choice, first.work_source, first.slack_hours) == ("spot", None, None)
    assert moved.choice == "on-demand"
    assert moved.work_source is not None
    assert moved.work_source.startswith("progress: 100 steps in 0.3")

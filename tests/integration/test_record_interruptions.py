"""What the job record says of an interruption, through the handlers, over moto: end reason and steps lost."""

from __future__ import annotations

import json

import boto3
import pytest

from functions import acquire, agent_step, ec2_events, interrupted
from spotrun.aws.adapters import job_store
from spotrun.model.agent_protocol.command import FailureCause, StageResult
from spotrun.model.layout import checkpoint_prefix, commit_marker_key, progress_key
from tests.integration.conftest import load_event
from tests.integration.test_workflow_handlers import TIMING

LOST = {
    "Error": "Instance.Lost",
    "Cause": FailureCause(message="instance is shutting-down").model_dump_json(),
}


@pytest.fixture
def training_job(deployment, job_id, lambda_context):
    """A job training on attempt 1, that committed step 500 and reported step 727: ``(job_id, instance_id)``."""
    attempt = acquire.handler({"job_id": job_id, "timing": TIMING}, lambda_context)
    for step in ("stage", "train"):
        agent_step.handler(
            {"job_id": job_id, "step": step, "task_token": f"token-{step}", "timing": TIMING}, lambda_context
        )
    commit(deployment, job_id, 500)
    put(deployment, progress_key(job_id, 1), {"step": 727})
    return job_id, attempt["instance_id"]


def put(deployment, key: str, body: dict) -> None:
    boto3.client("s3").put_object(Bucket=deployment.jobs_bucket, Key=key, Body=json.dumps(body).encode())


def commit(deployment, job_id: str, step: int) -> None:
    put(deployment, commit_marker_key(job_id, step), {"step": step})


def warning(instance_id: str) -> dict:
    event = load_event("ec2-spot-interruption-warning.json")
    event["detail"]["instance-id"] = instance_id
    return event


def record(deployment, job_id: str):
    return job_store(deployment.jobs_table, deployment.region).get(job_id)


def resume(job_id: str, restored_step: int | None, lambda_context) -> None:
    """The workflow's next attempt: acquire, stage, then train with what staging restored."""
    acquire.handler({"job_id": job_id, "timing": TIMING}, lambda_context)
    agent_step.handler(
        {"job_id": job_id, "step": "stage", "task_token": "t2", "timing": TIMING}, lambda_context
    )
    prefix = None if restored_step is None else checkpoint_prefix(job_id, restored_step)
    staged = StageResult(
        files=1, bytes=1, seconds=0.1, checkpoint_restored=prefix, restored_step=restored_step
    )
    agent_step.handler(
        {
            "job_id": job_id,
            "step": "train",
            "task_token": "t3",
            "timing": TIMING,
            "staged": staged.model_dump(mode="json"),
        },
        lambda_context,
    )


def test_a_warned_instance_lost_before_its_report_is_interrupted_and_loses_what_the_next_attempt_did_not_restore(
    deployment, training_job, lambda_context
):
    # Given a training job whose instance got the warning, then was reclaimed before its agent reported
    job_id, instance_id = training_job
    ec2_events.handler(warning(instance_id), lambda_context)
    # When the workflow records the lost instance, the old instance then commits the checkpoint it took on
    # the warning (step 727, within its notice), and the next attempt restores it
    closed = interrupted.handler({"job_id": job_id, "error": LOST}, lambda_context)
    commit(deployment, job_id, 727)
    resume(job_id, 727, lambda_context)
    # Then the attempt was interrupted (not a silent loss), at close counted from step 500, and once the next
    # attempt restored step 727: nothing lost, the warning's checkpoint committed
    assert (closed["reason"], closed["steps_lost"]) == ("interrupted", 227)
    first = record(deployment, job_id).attempts[0]
    assert (first.end_reason, first.last_step, first.steps_lost) == ("interrupted", 727, 0)
    assert (first.steps_lost_basis, first.notice_checkpoint_committed) == ("restored", True)


def test_a_warning_handled_after_the_loss_was_recorded_makes_the_attempt_interrupted_and_acts_on_nothing(
    deployment, training_job, lambda_context
):
    # Given a job whose lost instance was recorded before its warning was handled (the state change first)
    job_id, instance_id = training_job
    interrupted.handler({"job_id": job_id, "error": LOST}, lambda_context)
    assert record(deployment, job_id).attempts[0].end_reason == "instance-lost"
    launched = len(boto3.client("ec2").describe_instances()["Reservations"])
    # When the warning arrives, twice
    outcomes = [ec2_events.handler(warning(instance_id), lambda_context) for _ in range(2)]
    # Then the record says interrupted, with the notice; the agent is not told and nothing is launched
    assert outcomes[0]["action"].startswith("late warning recorded")
    assert outcomes[1]["action"].startswith("ignored")
    job = record(deployment, job_id)
    first = job.attempts[0]
    assert first.end_reason == "interrupted"
    assert first.notice_at is not None
    assert job.interruptions == 1
    assert job.standby is None
    assert len(boto3.client("ec2").describe_instances()["Reservations"]) == launched
    notices = [
        c
        for c in boto3.client("ssm").list_commands()["Commands"]
        if c["Parameters"]["commandUri"][0].endswith("-notice.json")
    ]
    assert notices == []

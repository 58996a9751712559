import json

import boto3
import pytest

from functions import acquire, agent_step, ec2_events, interrupted
from spotrun.aws.adapters import job_store
from spotrun.model.agent_protocol.command import FailureCause
from spotrun.model.job.record import JobStatus
from tests.integration.conftest import load_event
from tests.integration.test_workflow_handlers import TIMING


@pytest.fixture
def training_job(deployment, job_id, lambda_context):
    """A job whose training step is in progress on a launched instance."""
    attempt = acquire.handler({"job_id": job_id, "timing": TIMING}, lambda_context)
    for step in ("stage", "train"):
        agent_step.handler(
            {"job_id": job_id, "step": step, "task_token": f"token-{step}", "timing": TIMING}, lambda_context
        )
    return job_id, attempt["instance_id"]


def event_for(name: str, instance_id: str) -> dict:
    event = load_event(name)
    event["detail"]["instance-id"] = instance_id
    return event


def test_the_documented_warning_for_an_unknown_instance_is_ignored(deployment, lambda_context):
    # Given the sample warning as AWS documents it, for an instance spotrun does not know
    # When it reaches the function
    outcome = ec2_events.handler(load_event("ec2-spot-interruption-warning.json"), lambda_context)
    # Then nothing is done
    assert outcome["action"].startswith("ignored")
    assert outcome["job_id"] is None


def test_a_warning_records_the_notice_tells_the_agent_and_launches_the_replacement(
    deployment, training_job, lambda_context
):
    # Given a training job
    job_id, instance_id = training_job
    # When its instance's interruption warning arrives twice
    first = ec2_events.handler(event_for("ec2-spot-interruption-warning.json", instance_id), lambda_context)
    second = ec2_events.handler(event_for("ec2-spot-interruption-warning.json", instance_id), lambda_context)
    # Then one replacement instance was launched for the job, and the agent got a notice command once
    assert first["action"] == "warning recorded"
    assert second["action"].startswith("ignored")
    reservations = boto3.client("ec2").describe_instances(
        Filters=[{"Name": "tag:spotrun:job-id", "Values": [job_id]}]
    )["Reservations"]
    launched = {instance["InstanceId"] for r in reservations for instance in r["Instances"]}
    assert launched == {instance_id, first["standby_instance_id"]}
    notices = [
        c
        for c in boto3.client("ssm").list_commands()["Commands"]
        if c["Parameters"]["commandUri"][0].endswith("-notice.json")
    ]
    assert [c["InstanceIds"] for c in notices] == [[instance_id]]
    job = job_store(deployment.jobs_table, deployment.region).get(job_id)
    assert job.current_attempt.notice_at is not None
    assert job.standby.instance_id == first["standby_instance_id"]


def test_the_interrupted_function_closes_the_attempt_with_the_agents_cause(
    deployment, training_job, lambda_context
):
    # Given a training job whose agent reported Spot.Interrupted after committing step 120, at step 120
    job_id, instance_id = training_job
    cause = FailureCause(message="spot notice", checkpoint_step=120, last_step=120)
    # When the workflow records it
    record = interrupted.handler(
        {"job_id": job_id, "error": {"Error": "Spot.Interrupted", "Cause": cause.model_dump_json()}},
        lambda_context,
    )
    # Then the attempt ended as interrupted, the instance is released, and the job awaits new capacity
    assert record["reason"] == "interrupted"
    assert record["last_step"] == 120
    job = job_store(deployment.jobs_table, deployment.region).get(job_id)
    assert job.status is JobStatus.INTERRUPTED
    assert job.attempts[0].end_reason == "interrupted"
    state = boto3.client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][
        0
    ]
    assert state["State"]["Name"] in ("shutting-down", "terminated")
    assert json.loads(json.dumps(record))["interruptions"] == 1

import hashlib
import json

import boto3
import pytest

from functions import acquire, agent_step, archive, finalize, instance_ready, release
from spotrun.aws.adapters import job_store
from spotrun.local.patches import ssm
from spotrun.local.patches.reversible import PatchSet
from spotrun.model.agent_protocol.command import FailureCause, OutputList, OutputObject, TrainResult
from spotrun.model.errors import CapacityConfigurationError, InstanceLost
from spotrun.model.job.record import JobStatus
from spotrun.model.timing import workflow_timing
from spotrun.shape import SHAPE
from tests.integration.conftest import MANIFEST

TIMING = workflow_timing(MANIFEST, 1.0).model_dump()
# One look per readiness check: AWS's hold (45 s) would only slow these tests (tests/unit/test_readiness.py has it).
ONE_LOOK = {**TIMING, "ready_hold_seconds": 0}


@pytest.fixture
def ssm_nodes():
    """Managed nodes (id -> PingStatus) for DescribeInstanceInformation, which moto 5.2.5 lacks."""
    nodes: dict[str, str] = {}
    patches = PatchSet()
    ssm.install_instance_information(patches, lambda: dict(nodes))
    yield nodes
    patches.undo_all()


def stored(deployment, job_id):
    return job_store(deployment.jobs_table, deployment.region).get(job_id)


def test_acquire_launches_one_tagged_spot_instance_and_a_retry_launches_nothing(
    deployment, job_id, lambda_context
):
    # Given a submitted job
    # When capacity is acquired, and the call is retried (as Step Functions may do)
    attempt = acquire.handler({"job_id": job_id, "timing": TIMING}, lambda_context)
    again = acquire.handler({"job_id": job_id, "timing": TIMING}, lambda_context)
    # Then exactly one instance exists, of a candidate type, tagged with the job
    assert again == attempt
    ec2 = boto3.client("ec2")
    instances = [i for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]]
    assert [i["InstanceId"] for i in instances] == [attempt["instance_id"]]
    assert attempt["instance_type"].startswith(("g4dn.", "g5."))
    assert attempt["lifecycle"] == "spot"
    assert {"Key": "spotrun:job-id", "Value": job_id} in instances[0]["Tags"]
    # And the job is booting on it, and the instance leads back to the job
    job = stored(deployment, job_id)
    assert job.status is JobStatus.BOOTING
    assert job.attempts[0].instance_id == attempt["instance_id"]
    assert (
        job_store(deployment.jobs_table, deployment.region).job_for_instance(attempt["instance_id"]) == job_id
    )


def test_acquire_fails_fast_when_the_launch_template_does_not_exist(
    deployment, job_id, lambda_context, monkeypatch
):
    # Given a deployment whose launch template is missing (EC2 refuses CreateFleet as a whole)
    monkeypatch.setenv("SPOTRUN_LAUNCH_TEMPLATE_NAME", "no-such-template")
    # When capacity is acquired
    with pytest.raises(CapacityConfigurationError) as raised:
        acquire.handler({"job_id": job_id, "timing": TIMING}, lambda_context)
    # Then the refusal is a configuration error the workflow does not wait on, with the code and the fix
    assert type(raised.value).__name__ == "Capacity.ConfigurationError"
    assert "InvalidLaunchTemplateName.NotFoundException" in str(raised.value)
    assert "deploy the spotrun stack" in str(raised.value)
    assert stored(deployment, job_id).capacity_wait is None


def test_instance_ready_waits_for_ssm_and_raises_when_the_instance_is_gone(
    deployment, job_id, lambda_context, ssm_nodes
):
    # Given a launched instance, running (moto runs it at once) but not yet registered with SSM
    attempt = acquire.handler({"job_id": job_id, "timing": TIMING}, lambda_context)
    instance_id = attempt["instance_id"]
    # When readiness is checked
    report = instance_ready.handler({"job_id": job_id, "timing": ONE_LOOK}, lambda_context)
    # Then it is not ready yet
    assert report == {"ready": False, "instance_id": instance_id, "state": "running", "agent_online": False}
    # When SSM knows it but its agent does not answer
    ssm_nodes[instance_id] = "ConnectionLost"
    # Then it is still not ready
    assert not instance_ready.handler({"job_id": job_id, "timing": ONE_LOOK}, lambda_context)["ready"]
    # When its SSM agent is online
    ssm_nodes[instance_id] = "Online"
    report = instance_ready.handler({"job_id": job_id, "timing": ONE_LOOK}, lambda_context)
    # Then it is ready
    assert report == {"ready": True, "instance_id": instance_id, "state": "running", "agent_online": True}
    # When it is terminated before the job used it
    boto3.client("ec2").terminate_instances(InstanceIds=[attempt["instance_id"]])
    # Then the check fails with the error the workflow routes on
    with pytest.raises(InstanceLost) as raised:
        instance_ready.handler({"job_id": job_id, "timing": ONE_LOOK}, lambda_context)
    assert type(raised.value).__name__ == "Instance.Lost"


def test_agent_step_sends_the_command_through_s3_and_never_shows_the_token(
    deployment, job_id, lambda_context, capsys
):
    # Given a running instance
    attempt = acquire.handler({"job_id": job_id, "timing": TIMING}, lambda_context)
    token = "secret-task-token-" + "x" * 40
    # When the stage step is sent
    answer = agent_step.handler(
        {"job_id": job_id, "step": "stage", "task_token": token, "timing": TIMING}, lambda_context
    )
    # Then SSM got the agent document for that instance, with only the command's S3 URI
    commands = boto3.client("ssm").list_commands(CommandId=answer["command_id"])["Commands"]
    assert commands[0]["DocumentName"] == SHAPE.agent_document_name
    assert commands[0]["InstanceIds"] == [attempt["instance_id"]]
    uri = commands[0]["Parameters"]["commandUri"][0]
    assert token not in json.dumps(commands[0], default=str)
    # And the command document holds the step, the manifest and the report route, never the token
    key = uri.removeprefix(f"s3://{deployment.jobs_bucket}/")
    document = json.loads(
        boto3.client("s3").get_object(Bucket=deployment.jobs_bucket, Key=key)["Body"].read()
    )
    assert token not in json.dumps(document)
    assert document["report_url"] == deployment.agent_report_url
    assert document["step"] == "stage"
    assert document["manifest"]["name"] == "tiny"
    # And the job is staging, and the token appears in no log line
    assert stored(deployment, job_id).status is JobStatus.STAGING
    assert token not in capsys.readouterr().out


def test_archive_copies_the_model_in_the_manifest_class_with_readable_metadata(
    deployment, job_id, lambda_context
):
    # Given a job whose training uploaded its model
    acquire.handler({"job_id": job_id, "timing": TIMING}, lambda_context)
    agent_step.handler(
        {"job_id": job_id, "step": "stage", "task_token": "t", "timing": TIMING}, lambda_context
    )
    agent_step.handler(
        {"job_id": job_id, "step": "train", "task_token": "t", "timing": TIMING}, lambda_context
    )
    body = b"model-bytes"
    digest = hashlib.sha256(body).hexdigest()
    key = f"jobs/{job_id}/output/model.npy"
    s3 = boto3.client("s3")
    s3.put_object(Bucket=deployment.jobs_bucket, Key=key, Body=body)
    listed = [OutputObject(key=key, size=len(body), sha256=digest).model_dump()]
    list_key = f"jobs/{job_id}/agent/attempt-001-outputs.json"
    s3.put_object(Bucket=deployment.jobs_bucket, Key=list_key, Body=json.dumps(listed).encode())
    trained = TrainResult(
        seconds=1.0,
        outputs=OutputList(key=list_key, count=1, bytes=len(body)),
        model_key=key,
        model_sha256=digest,
        log_key=f"jobs/{job_id}/logs/attempt-001.log",
    )
    # When the model is archived
    result = archive.handler({"job_id": job_id, "trained": trained.model_dump(mode="json")}, lambda_context)
    # Then it lies in the archive bucket in DEEP_ARCHIVE, and the metadata stays readable
    assert result == {"objects": 1, "bytes": len(body)}
    [archived] = stored(deployment, job_id).archive
    assert archived.uri == f"s3://{deployment.archive_bucket}/models/{job_id}/model.npy"
    assert archived.storage_class == "DEEP_ARCHIVE"
    head = s3.head_object(Bucket=deployment.archive_bucket, Key=f"models/{job_id}/model.npy")
    assert head["StorageClass"] == "DEEP_ARCHIVE"
    metadata = json.loads(
        s3.get_object(Bucket=deployment.archive_bucket, Key=f"models/{job_id}/spotrun-model.json")[
            "Body"
        ].read()
    )
    assert metadata["model_sha256"] == digest
    job = stored(deployment, job_id)
    assert job.status is JobStatus.ARCHIVING
    assert job.model_sha256 == digest


def test_release_terminates_the_instance_closes_the_attempt_and_can_run_twice(
    deployment, job_id, lambda_context
):
    # Given a job with an instance
    attempt = acquire.handler({"job_id": job_id, "timing": TIMING}, lambda_context)
    # When capacity is released twice
    first = release.handler({"job_id": job_id, "reason": "failed"}, lambda_context)
    second = release.handler({"job_id": job_id, "reason": "failed"}, lambda_context)
    # Then the instance is terminated and the attempt closed once
    assert first["terminated"] == [attempt["instance_id"]]
    assert second["terminated"] in ([], [attempt["instance_id"]])
    state = boto3.client("ec2").describe_instances(InstanceIds=[attempt["instance_id"]])["Reservations"][0][
        "Instances"
    ][0]["State"]["Name"]
    assert state in ("shutting-down", "terminated")
    [closed] = stored(deployment, job_id).attempts
    assert closed.end_reason == "failed"
    assert closed.ended_at is not None


def test_finalize_records_the_training_failure_with_exit_code_and_log_tail(
    deployment, job_id, lambda_context
):
    # Given a job whose training failed on the instance
    acquire.handler({"job_id": job_id, "timing": TIMING}, lambda_context)
    release.handler({"job_id": job_id, "reason": "failed"}, lambda_context)
    cause = FailureCause(message="the training command exited with code 3", exit_code=3, log_tail="boom\n")
    # When the workflow records the failure
    result = finalize.handler(
        {
            "job_id": job_id,
            "outcome": "FAILED",
            "error": {"Error": "Training.Failed", "Cause": cause.model_dump_json()},
        },
        lambda_context,
    )
    # Then the job is FAILED with the exit code and the log's tail, and its cost is known
    assert result["status"] == "FAILED"
    job = stored(deployment, job_id)
    assert job.error.type == "Training.Failed"
    assert job.error.exit_code == 3
    assert job.error.log_tail == "boom\n"
    assert job.cost is not None
    assert job.cost.spot_instances == 1
    assert job.cost.spot_at_on_demand_usd > 0  # a minute of g4dn at list price; moto's spot price rounds to 0


def test_finalize_reports_a_lambda_error_by_its_message(deployment, job_id, lambda_context):
    # Given a job that failed in a Lambda step
    error = {
        "Error": "Capacity.MaxWaitExceeded",
        "Cause": json.dumps({"errorType": "Capacity.MaxWaitExceeded", "errorMessage": "no capacity"}),
    }
    # When the failure is recorded
    finalize.handler({"job_id": job_id, "outcome": "FAILED", "error": error}, lambda_context)
    # Then the message is the Lambda's, not the raw JSON
    job = stored(deployment, job_id)
    assert job.status is JobStatus.FAILED
    assert job.error.type == "Capacity.MaxWaitExceeded"
    assert job.error.message == "no capacity"

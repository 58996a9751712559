"""The REST API's function against moto: cancelling jobs, tailing their logs, restoring archived models."""

from __future__ import annotations

import boto3
import pytest

from spotrun.aws.adapters import job_store
from spotrun.control.store import update_job
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import ArchivedObject, JobStatus, transition, utc_now
from spotrun.model.layout import commit_marker_key, log_key
from tests.integration.api_client import TINY, call


def _running_job(settings, context) -> tuple[str, str]:
    """A submitted job now training on a tagged instance, with one committed checkpoint in S3."""
    job_id = call(context, "POST", "/jobs", TINY).body["job_id"]
    ec2 = boto3.client("ec2")
    instance_id = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": "spotrun:job-id", "Value": job_id}]}
        ],
    )["Instances"][0]["InstanceId"]
    now = utc_now()
    attempt = Attempt(
        number=1,
        instance_id=instance_id,
        instance_type="g5.xlarge",
        availability_zone="us-east-1a",
        lifecycle="spot",
        price_per_hour=0.4,
        started_at=now,
    )

    def train(job):
        job = transition(job, JobStatus.ACQUIRING, now)
        job = transition(job, JobStatus.BOOTING, now).model_copy(update={"attempts": [attempt]})
        return transition(transition(job, JobStatus.STAGING, now), JobStatus.TRAINING, now)

    update_job(job_store(settings.jobs_table, settings.region), job_id, train)
    boto3.client("s3").put_object(Bucket=settings.jobs_bucket, Key=commit_marker_key(job_id, 100), Body=b"{}")
    return job_id, instance_id


def _state(instance_id: str) -> str:
    reservations = boto3.client("ec2").describe_instances(InstanceIds=[instance_id])["Reservations"]
    return reservations[0]["Instances"][0]["State"]["Name"]


def test_cancel_stops_the_workflow_terminates_instances_and_keeps_checkpoints(deployment, lambda_context):
    # Given a job training on an instance, with a committed checkpoint
    job_id, instance_id = _running_job(deployment, lambda_context)
    # When it is cancelled
    answer = call(lambda_context, "DELETE", f"/jobs/{job_id}")
    # Then its execution is stopped, its instance terminated, its checkpoint kept, and it is CANCELLED
    assert answer.status == 200
    assert answer.body["execution_stopped"] is True
    assert answer.body["instances_terminated"] == [instance_id]
    assert answer.body["job"]["status"] == "CANCELLED"
    job = job_store(deployment.jobs_table, deployment.region).get(job_id)
    sfn = boto3.client("stepfunctions")
    assert sfn.describe_execution(executionArn=job.execution_arn)["status"] == "ABORTED"
    assert _state(instance_id) in ("shutting-down", "terminated")
    assert job.attempts[0].end_reason == "cancelled"
    assert job.cost is not None
    head = boto3.client("s3").head_object(Bucket=deployment.jobs_bucket, Key=commit_marker_key(job_id, 100))
    assert head["ContentLength"] == 2


def test_cancel_of_a_finished_job_is_a_409_and_changes_nothing(deployment, lambda_context):
    # Given a job that was cancelled already
    job_id, _ = _running_job(deployment, lambda_context)
    call(lambda_context, "DELETE", f"/jobs/{job_id}")
    store = job_store(deployment.jobs_table, deployment.region)
    before = store.get(job_id)
    # When it is cancelled again
    answer = call(lambda_context, "DELETE", f"/jobs/{job_id}")
    # Then the API refuses, naming the status, and the record is untouched
    assert answer.status == 409
    assert "CANCELLED" in answer.body["message"]
    assert store.get(job_id) == before


def test_cancel_of_an_unknown_job_is_a_404(deployment, lambda_context):
    answer = call(lambda_context, "DELETE", "/jobs/ghost-1")
    assert answer.status == 404
    assert "ghost-1" in answer.body["message"]


def test_logs_return_the_tail_of_each_attempts_training_log(deployment, lambda_context):
    # Given a job whose first attempt wrote 50 lines
    job_id, _ = _running_job(deployment, lambda_context)
    lines = [f"step {n} loss {1 / (n + 1):.4f}" for n in range(50)]
    s3 = boto3.client("s3")
    s3.put_object(Bucket=deployment.jobs_bucket, Key=log_key(job_id, 1), Body="\n".join(lines).encode())
    # When its last 3 lines are asked for
    answer = call(lambda_context, "GET", f"/jobs/{job_id}/logs", query="tail=3")
    # Then they come, marked as truncated
    assert answer.status == 200
    [log] = answer.body["logs"]
    assert log["attempt"] == 1
    assert log["found"] is True
    assert log["lines"] == lines[-3:]
    assert log["truncated"] is True


def test_logs_of_a_missing_attempt_is_a_404_and_an_unwritten_log_is_not_found(deployment, lambda_context):
    # Given a running job that has not written a log yet
    job_id, _ = _running_job(deployment, lambda_context)
    # When attempt 2 and then every attempt are asked for
    missing = call(lambda_context, "GET", f"/jobs/{job_id}/logs", query="attempt=2")
    every = call(lambda_context, "GET", f"/jobs/{job_id}/logs")
    # Then attempt 2 is refused by name, and attempt 1 has no log yet
    assert missing.status == 404
    assert "no attempt 2" in missing.body["message"]
    assert every.body["logs"][0]["found"] is False


def _archived_job(settings, context) -> tuple[str, list[str]]:
    job_id, _ = _running_job(settings, context)
    s3 = boto3.client("s3")
    archive = []
    for key, storage_class in (("model.npy", "DEEP_ARCHIVE"), ("meta.json", "GLACIER_IR")):
        s3.put_object(
            Bucket=settings.archive_bucket,
            Key=f"models/{job_id}/{key}",
            Body=b"x",
            StorageClass=storage_class,
        )
        uri = f"s3://{settings.archive_bucket}/models/{job_id}/{key}"
        archive.append(ArchivedObject(uri=uri, storage_class=storage_class, size=1, sha256="0" * 64))
    update_job(
        job_store(settings.jobs_table, settings.region),
        job_id,
        lambda job: job.model_copy(update={"archive": archive}),
    )
    return job_id, [item.uri for item in archive]


def test_restore_reports_archived_objects_then_restores_them(deployment, lambda_context):
    # Given a job whose model sits in DEEP_ARCHIVE, with its metadata in GLACIER_IR
    job_id, uris = _archived_job(deployment, lambda_context)
    # When its restore state is asked for, before and after a restore is started (twice: idempotent)
    before = call(lambda_context, "GET", f"/jobs/{job_id}/restore")
    started = call(lambda_context, "POST", f"/jobs/{job_id}/restore", query="days=2")
    again = call(lambda_context, "POST", f"/jobs/{job_id}/restore")
    after = call(lambda_context, "GET", f"/jobs/{job_id}/restore")
    # Then GLACIER_IR is readable at once, the deep archive only once restored (moto restores instantly)
    assert before.status == 200
    assert [o["state"] for o in before.body["objects"]] == ["archived", "readable"]
    assert before.body["readable"] is False
    assert started.status == again.status == 202
    assert after.body["readable"] is True
    model = after.body["objects"][0]
    assert model["uri"] == uris[0]
    assert model["state"] == "readable"
    assert model["expires"]
    body = boto3.client("s3").get_object(Bucket=deployment.archive_bucket, Key=uris[0].split("/", 3)[3])
    assert body["Body"].read() == b"x"


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_restore_of_a_job_without_an_archive_is_a_409(deployment, lambda_context, method):
    # Given a job still training (nothing archived)
    job_id, _ = _running_job(deployment, lambda_context)
    # When a restore is asked for, Then it is refused by name
    answer = call(lambda_context, method, f"/jobs/{job_id}/restore")
    assert answer.status == 409
    assert "no archived model" in answer.body["message"]

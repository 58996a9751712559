import json

import boto3

from functions import submit
from spotrun.aws.adapters import job_store
from tests.integration.conftest import load_event

VALID = b"""
name: tiny
training:
  command: [python, train.py]
"""
INVALID = b"""
name: Not Valid
training:
  command: "python train.py"
resources:
  gpus_per_node: 0
"""


def s3_event(bucket: str, key: str, etag: str) -> dict:
    event = load_event("s3-object-created.json")
    event["detail"]["bucket"]["name"] = bucket
    event["detail"]["object"]["key"] = key
    event["detail"]["object"]["etag"] = etag
    return event


def put(settings, key, body) -> str:
    answer = boto3.client("s3").put_object(Bucket=settings.jobs_bucket, Key=key, Body=body)
    return answer["ETag"].strip('"')


def executions(settings):
    return boto3.client("stepfunctions").list_executions(stateMachineArn=settings.state_machine_arn)[
        "executions"
    ]


def test_a_valid_manifest_starts_one_workflow_named_after_the_job(deployment, lambda_context):
    # Given a manifest dropped into the jobs bucket
    etag = put(deployment, "manifests/tiny.yaml", VALID)
    # When the S3 event reaches the submit function
    result = submit.handler(s3_event(deployment.jobs_bucket, "manifests/tiny.yaml", etag), lambda_context)
    # Then one execution runs, named after the recorded job, with the timing in its input
    assert result["outcome"] == "started"
    job = job_store(deployment.jobs_table, deployment.region).get(result["job_id"])
    assert job.status.value == "SUBMITTED"
    assert job.execution_arn == result["execution_arn"]
    assert job.manifest is not None
    assert job.manifest.training.command == ["python", "train.py"]
    [execution] = executions(deployment)
    assert execution["name"] == result["job_id"]
    payload = json.loads(
        boto3.client("stepfunctions").describe_execution(executionArn=job.execution_arn)["input"]
    )
    assert payload["job_id"] == result["job_id"]
    assert payload["timing"]["heartbeat_seconds"] == 300


def test_the_same_object_delivered_twice_starts_one_job(deployment, lambda_context):
    # Given one manifest object and its event
    etag = put(deployment, "manifests/tiny.yaml", VALID)
    event = s3_event(deployment.jobs_bucket, "manifests/tiny.yaml", etag)
    # When EventBridge delivers the event twice
    first = submit.handler(event, lambda_context)
    second = submit.handler(event, lambda_context)
    # Then the second delivery is recognised and nothing new starts
    assert first["outcome"] == "started"
    assert second["outcome"] == "duplicate"
    assert second["job_id"] == first["job_id"]
    assert len(executions(deployment)) == 1


def test_a_new_version_of_the_object_is_a_new_job(deployment, lambda_context):
    # Given a manifest uploaded, then uploaded again with a change
    first_etag = put(deployment, "manifests/tiny.yaml", VALID)
    first = submit.handler(
        s3_event(deployment.jobs_bucket, "manifests/tiny.yaml", first_etag), lambda_context
    )
    second_etag = put(deployment, "manifests/tiny.yaml", VALID + b"tags: {team: vision}\n")
    # When the second upload's event arrives
    second = submit.handler(
        s3_event(deployment.jobs_bucket, "manifests/tiny.yaml", second_etag), lambda_context
    )
    # Then it is a job of its own
    assert second["outcome"] == "started"
    assert second["job_id"] != first["job_id"]
    assert len(executions(deployment)) == 2


def test_an_invalid_manifest_is_rejected_beside_itself_and_starts_nothing(deployment, lambda_context):
    # Given an invalid manifest
    etag = put(deployment, "manifests/bad.yaml", INVALID)
    # When its event arrives
    result = submit.handler(s3_event(deployment.jobs_bucket, "manifests/bad.yaml", etag), lambda_context)
    # Then a report listing every problem appears beside it
    assert result["outcome"] == "rejected"
    report_body = boto3.client("s3").get_object(
        Bucket=deployment.jobs_bucket, Key="manifests/bad.yaml.rejected.json"
    )
    report = json.loads(report_body["Body"].read())
    assert report["status"] == "REJECTED"
    assert any(line.startswith("name:") for line in report["errors"])
    assert any(line.startswith("training.command:") for line in report["errors"])
    assert any(line.startswith("resources.gpus_per_node:") for line in report["errors"])
    # And the job store records the rejection, and no workflow started
    job = job_store(deployment.jobs_table, deployment.region).get(result["job_id"])
    assert job.status.value == "REJECTED"
    assert job.error.type == "Manifest.Invalid"
    assert len(job.error.details) == 3
    assert executions(deployment) == []


def test_the_rejection_report_itself_does_not_trigger_a_submission(deployment, lambda_context):
    # Given the event of our own report object
    event = s3_event(deployment.jobs_bucket, "manifests/bad.yaml.rejected.json", "abc")
    # When it reaches the function
    result = submit.handler(event, lambda_context)
    # Then it is ignored
    assert result["outcome"] == "ignored"
    assert executions(deployment) == []


def test_a_manifest_no_instance_type_can_serve_is_rejected_at_the_drop(deployment, lambda_context):
    # Given a valid manifest asking for a GPU count no catalogued type has
    body = VALID + b"resources: {gpus_per_node: 3}\n"
    etag = put(deployment, "manifests/odd.yaml", body)
    # When its event arrives
    result = submit.handler(s3_event(deployment.jobs_bucket, "manifests/odd.yaml", etag), lambda_context)
    # Then it is rejected with a reason naming resources, before any workflow starts
    assert result["outcome"] == "rejected"
    report = json.loads(
        boto3.client("s3")
        .get_object(Bucket=deployment.jobs_bucket, Key="manifests/odd.yaml.rejected.json")["Body"]
        .read()
    )
    [line] = report["errors"]
    assert line.startswith("resources:")
    assert executions(deployment) == []

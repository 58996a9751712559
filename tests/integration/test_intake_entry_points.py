"""Both entry points against moto (the submit function on an S3 event, the API function on POST /jobs): a
schedule is never ignored, an oversized object is never read, nodes > 1 is refused, and an Idempotency-Key whose
record expired still cannot start another manifest's job."""

from __future__ import annotations

import json

import boto3

from functions import submit
from spotrun.aws.adapters import job_store
from spotrun.aws.objects import S3Objects
from spotrun.control.submission import SCHEDULE_REFUSED
from tests.integration.api_client import TINY, call
from tests.integration.test_submit_handler import executions, put, s3_event

SCHEDULED = {**TINY, "schedule": {"expression": "cron(0 3 ? * MON *)"}}


def report_of(settings, key: str) -> dict:
    body = boto3.client("s3").get_object(Bucket=settings.jobs_bucket, Key=key + ".rejected.json")["Body"]
    return json.loads(body.read())


def test_a_dropped_manifest_with_a_schedule_is_rejected_pointing_at_the_schedules_api(
    deployment, lambda_context
):
    # Given a schedule-bearing manifest dropped into manifests/
    key = "manifests/nightly.json"
    etag = put(deployment, key, json.dumps(SCHEDULED).encode())
    # When the submit function handles it
    result = submit.handler(s3_event(deployment.jobs_bucket, key, etag), lambda_context)
    # Then nothing runs, and the report and the record name the schedules API
    assert result["outcome"] == "rejected"
    assert executions(deployment) == []
    assert SCHEDULE_REFUSED in report_of(deployment, key)["errors"]
    job = job_store(deployment.jobs_table, deployment.region).get(result["job_id"])
    assert SCHEDULE_REFUSED in job.error.details


def test_an_object_past_the_size_limit_is_rejected_without_being_read(
    deployment, lambda_context, monkeypatch
):
    # Given a 300 KiB object under manifests/, whose event carries its size
    key = "manifests/huge.yaml"
    body = b"name: huge\n#" + b"x" * (300 * 1024)
    etag = put(deployment, key, body)
    event = s3_event(deployment.jobs_bucket, key, etag)
    event["detail"]["object"]["size"] = len(body)
    reads = []
    original = S3Objects.get_bytes
    monkeypatch.setattr(S3Objects, "get_bytes", lambda self, b, k: reads.append(k) or original(self, b, k))
    # When the submit function handles it
    result = submit.handler(event, lambda_context)
    # Then it is rejected for its size, and the manifest itself was never downloaded
    assert result["outcome"] == "rejected"
    assert key not in reads
    assert "at most 262144 bytes (256 KiB)" in report_of(deployment, key)["errors"][0]


def test_a_posted_manifest_with_a_schedule_is_refused_with_the_way_to_schedule_it(deployment, lambda_context):
    answer = call(lambda_context, "POST", "/jobs", SCHEDULED)
    assert answer.status == 422
    assert answer.body["errors"] == [SCHEDULE_REFUSED]
    assert executions(deployment) == []


def test_a_group_without_torchrun_is_refused_at_validation_on_both_paths(deployment, lambda_context):
    # Given a two-node manifest whose command is a plain script (nothing would join the nodes)
    two_nodes = {**TINY, "resources": {"nodes": 2}}
    # When it is posted and dropped
    answer = call(lambda_context, "POST", "/jobs", two_nodes)
    key = "manifests/two.json"
    etag = put(deployment, key, json.dumps(two_nodes).encode())
    dropped = submit.handler(s3_event(deployment.jobs_bucket, key, etag), lambda_context)
    # Then both refuse it, saying the command must start torchrun
    assert answer.status == 422
    assert any("must start torchrun" in line for line in answer.body["errors"])
    assert dropped["outcome"] == "rejected"
    assert "must start torchrun" in report_of(deployment, key)["errors"][0]


def test_a_key_reused_with_another_manifest_after_its_record_expired_is_a_409(deployment, lambda_context):
    # Given a job submitted with a key, whose idempotency record then expired (DynamoDB TTL removed it)
    first = call(lambda_context, "POST", "/jobs", TINY, headers={"Idempotency-Key": "nightly-1"})
    dynamodb = boto3.client("dynamodb")
    for item in dynamodb.scan(TableName=deployment.idempotency_table)["Items"]:
        dynamodb.delete_item(TableName=deployment.idempotency_table, Key={"id": item["id"]})
    # When the same key comes with another manifest, and then with the first one again
    other = call(
        lambda_context,
        "POST",
        "/jobs",
        {**TINY, "tags": {"t": "x"}},
        headers={"Idempotency-Key": "nightly-1"},
    )
    same = call(lambda_context, "POST", "/jobs", TINY, headers={"Idempotency-Key": "nightly-1"})
    # Then the other manifest is a 409 and starts nothing; the first is still the same job
    assert first.status == 202
    assert other.status == 409
    assert "Idempotency-Key" in other.body["message"]
    assert same.status == 202
    assert same.body["job_id"] == first.body["job_id"]
    assert len(executions(deployment)) == 1


def test_hostile_json_bodies_are_a_400_naming_the_problem_not_a_500(deployment, lambda_context):
    # Given bodies json.loads cannot read (too deep, an integer past the digit limit) or the S3 path refuses
    head = b'{"name": "tiny", "training": {"command": ["python"]}, "tags": '
    bodies = {
        "nested deeper than 64 levels": head + b"[" * 5000 + b"]" * 5000 + b"}",
        "integer string conversion": head + b'{"a": ' + b"1" * 5000 + b"}}",
        "unpaired UTF-16 surrogate": head + b'{"a": "\\ud83d"}}',
    }
    for problem, body in bodies.items():
        # When each is posted, Then it is refused as a bad body, naming its problem
        answer = call(lambda_context, "POST", "/jobs", body)
        assert answer.status == 400, answer.body
        assert any(problem in line for line in answer.body["errors"]), answer.body


def test_a_rejection_with_thousands_of_errors_is_stored_in_dynamodb(deployment, lambda_context):
    # Given 9,000 inputs without a destination: 9,000 problems, about 510 KB of lines (moto, like DynamoDB,
    # refuses an item past 400 KB)
    key = "manifests/many.json"
    inputs = [{"source": "s3://bkt/x/"}] * 9_000
    etag = put(deployment, key, json.dumps({**TINY, "data": {"inputs": inputs}}).encode())
    # When the submit function handles it
    result = submit.handler(s3_event(deployment.jobs_bucket, key, etag), lambda_context)
    # Then the rejection is recorded, bounded, with the count of every problem
    job = job_store(deployment.jobs_table, deployment.region).get(result["job_id"])
    assert result["outcome"] == "rejected"
    assert job.error.message == "9000 problem(s) in the manifest"
    assert job.error.details[-1] == "... and 8950 more problem(s)"

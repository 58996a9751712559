"""Schedules through the API, and the scheduled_run handler, against moto."""

import json

import boto3
import pytest

from functions.finalize import handler as finalize
from functions.scheduled_run import handler as scheduled_run
from spotrun.aws.adapters import job_store
from spotrun.control.store import update_job
from spotrun.model.job.record import JobStatus, transition, utc_now
from tests.integration.api_client import TINY, call

REGION = "us-east-1"
NIGHTLY = {
    **TINY,
    "name": "nightly",
    "data": {"inputs": [{"source": "s3://spotrun-jobs-test/data/", "destination": "."}]},
    "schedule": {"expression": "cron(0 3 ? * MON-FRI *)", "only_if_data_changed": True},
}


def firing(settings, scheduled_time: str) -> dict:
    """What Scheduler sends scheduled_run for the schedule created from NIGHTLY (its Input, filled in)."""
    detail = boto3.client("scheduler", region_name=REGION).get_schedule(
        Name="nightly", GroupName=settings.schedule_group
    )
    text = detail["Target"]["Input"].replace("<aws.scheduler.scheduled-time>", scheduled_time)
    return json.loads(text)


@pytest.fixture
def nightly(deployment, lambda_context):
    boto3.client("s3", region_name=REGION).put_object(
        Bucket=deployment.jobs_bucket, Key="data/a.csv", Body=b"1"
    )
    created = call(lambda_context, "POST", "/schedules", NIGHTLY)
    assert created.status == 201, created.body
    return created.body


def test_a_schedule_is_created_listed_and_deleted(deployment, nightly, lambda_context):
    # Given a schedule created from a manifest
    # Then it answers with its expression and next run, and Scheduler has it in spotrun's group
    assert nightly["name"] == "nightly"
    assert nightly["expression"] == "cron(0 3 ? * MON-FRI *)"
    assert nightly["next_run"].endswith("03:00:00Z")
    detail = boto3.client("scheduler", region_name=REGION).get_schedule(Name="nightly", GroupName="spotrun")
    assert detail["Target"]["Arn"] == deployment.scheduled_run_arn
    assert detail["Target"]["RoleArn"] == deployment.scheduler_role_arn
    # When it is listed, Then it is there
    listed = call(lambda_context, "GET", "/schedules").body["schedules"]
    assert [item["name"] for item in listed] == ["nightly"]
    # When it is deleted, Then it is gone, and deleting it again is a 404
    assert call(lambda_context, "DELETE", "/schedules/nightly").status == 204
    assert call(lambda_context, "GET", "/schedules").body["schedules"] == []
    gone = call(lambda_context, "DELETE", "/schedules/nightly")
    assert gone.status == 404
    assert "nightly" in gone.body["message"]


@pytest.mark.parametrize(
    ("expression", "named"),
    [
        ("cron(0 25 * * ? *)", "hours must be 0-23"),
        ("rate(1 minutes)", "singular unit"),
        ("cron(0 3 * * *)", ""),
    ],
)
def test_an_expression_scheduler_would_refuse_is_a_4xx_naming_it_and_creates_nothing(
    deployment, lambda_context, expression, named
):
    # Given a manifest with a bad schedule expression
    body = {**NIGHTLY, "schedule": {"expression": expression}}
    # When it is posted
    answer = call(lambda_context, "POST", "/schedules", body)
    # Then the answer is a 4xx naming the expression, and no schedule nor manifest exists
    assert 400 <= answer.status < 500, answer.body
    assert expression in json.dumps(answer.body)
    assert named in json.dumps(answer.body)
    assert call(lambda_context, "GET", "/schedules").body["schedules"] == []
    listing = boto3.client("s3", region_name=REGION).list_objects_v2(
        Bucket=deployment.jobs_bucket, Prefix="schedules/"
    )
    assert listing.get("KeyCount", 0) == 0


def test_a_duplicated_firing_starts_one_job(deployment, nightly, lambda_context):
    # Given a firing of the schedule
    event = firing(deployment, "2026-12-01T03:00:00Z")
    # When Scheduler delivers it twice
    first = scheduled_run(event, lambda_context)
    second = scheduled_run(event, lambda_context)
    # Then both name one job, recorded once, whose source is the schedule at that time
    assert first["outcome"] == second["outcome"] == "started"
    assert first["job_id"] == second["job_id"]
    job = job_store(deployment.jobs_table, REGION).get(first["job_id"])
    assert (job.source.kind, job.source.key, job.source.etag) == (
        "schedule",
        "nightly",
        "2026-12-01T03:00:00Z",
    )
    executions = boto3.client("stepfunctions", region_name=REGION).list_executions(
        stateMachineArn=deployment.state_machine_arn
    )["executions"]
    assert len(executions) == 1
    assert len(call(lambda_context, "GET", "/schedules/nightly/runs").body["runs"]) == 1


def succeed(settings, job_id, lambda_context):
    """Walk the job through the happy path; finalize's success path is what promotes its fingerprint."""
    store = job_store(settings.jobs_table, REGION)
    for status in (
        JobStatus.ACQUIRING,
        JobStatus.BOOTING,
        JobStatus.STAGING,
        JobStatus.TRAINING,
        JobStatus.ARCHIVING,
    ):
        update_job(store, job_id, lambda job, status=status: transition(job, status, utc_now()))
    finalize({"job_id": job_id, "outcome": "SUCCEEDED"}, lambda_context)


def test_a_firing_with_unchanged_inputs_after_a_success_is_skipped_and_recorded(
    deployment, nightly, lambda_context
):
    # Given a first run whose job succeeded
    first = scheduled_run(firing(deployment, "2026-12-01T03:00:00Z"), lambda_context)
    succeed(deployment, first["job_id"], lambda_context)

    # When the schedule fires again with the data unchanged
    second = scheduled_run(firing(deployment, "2026-12-02T03:00:00Z"), lambda_context)

    # Then the run is skipped, no job is started, and the skip is listed with its reason
    assert second["outcome"] == "skipped"
    assert second["job_id"] is None
    runs = call(lambda_context, "GET", "/schedules/nightly/runs").body["runs"]
    assert [(run["scheduled_time"], run["outcome"]) for run in runs] == [
        ("2026-12-02T03:00:00Z", "skipped"),
        ("2026-12-01T03:00:00Z", "started"),
    ]
    assert first["job_id"] in runs[0]["reason"]

    # When the data changes, Then the next firing runs
    boto3.client("s3", region_name=REGION).put_object(
        Bucket=deployment.jobs_bucket, Key="data/a.csv", Body=b"2"
    )
    third = scheduled_run(firing(deployment, "2026-12-03T03:00:00Z"), lambda_context)
    assert third["outcome"] == "started"


def test_runs_of_an_unknown_schedule_are_a_404(deployment, lambda_context):
    # Given no schedule
    # When its runs are asked for
    answer = call(lambda_context, "GET", "/schedules/nope/runs")
    # Then the answer is a 404 naming it
    assert answer.status == 404
    assert "nope" in answer.body["message"]


def test_a_firing_whose_manifest_was_deleted_is_a_recorded_skip_listed_with_its_reason(
    deployment, nightly, lambda_context
):
    # Given a schedule whose stored manifest was deleted from the jobs bucket (S3 answers NoSuchKey)
    event = firing(deployment, "2026-12-01T03:00:00Z")
    s3 = boto3.client("s3", region_name=REGION)
    s3.delete_object(Bucket=deployment.jobs_bucket, Key=event["manifest_key"])

    # When Scheduler delivers the firing, twice
    first = scheduled_run(event, lambda_context)
    again = scheduled_run(event, lambda_context)

    # Then the handler answers (no NoSuchKey escapes), nothing is started, and the schedule's runs list the one
    # skip with a reason naming the missing manifest and what to do
    assert first == again
    assert (first["outcome"], first["job_id"]) == ("skipped", None)
    executions = boto3.client("stepfunctions", region_name=REGION).list_executions(
        stateMachineArn=deployment.state_machine_arn
    )["executions"]
    assert executions == []
    runs = call(lambda_context, "GET", "/schedules/nightly/runs").body["runs"]
    assert [(run["scheduled_time"], run["outcome"]) for run in runs] == [("2026-12-01T03:00:00Z", "skipped")]
    assert f"s3://{deployment.jobs_bucket}/{event['manifest_key']} no longer exists" in runs[0]["reason"]
    assert "create it again" in runs[0]["reason"]

"""``GET /jobs/{id}/logs`` against moto: the live streams first, the S3 copy without them, a cursor across attempts."""

from __future__ import annotations

import urllib.parse

import boto3

from spotrun.aws.adapters import job_store
from spotrun.control.store import update_job
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import JobStatus, transition, utc_now
from spotrun.model.layout import log_group, log_key, log_stream
from tests.integration.api_client import TINY, call


def _attempt(number: int) -> Attempt:
    return Attempt(
        number=number,
        instance_id=f"i-{number:017x}",
        instance_type="g5.xlarge",
        availability_zone="us-east-1a",
        lifecycle="spot",
        price_per_hour=0.4,
        started_at=utc_now(),
    )


def _training_job(settings, context) -> str:
    job_id = call(context, "POST", "/jobs", TINY).body["job_id"]
    now = utc_now()

    def train(job):
        for status in (JobStatus.ACQUIRING, JobStatus.BOOTING, JobStatus.STAGING, JobStatus.TRAINING):
            job = transition(job, status, now)
        return job.model_copy(update={"attempts": [_attempt(1)]})

    update_job(job_store(settings.jobs_table, settings.region), job_id, train)
    return job_id


def _add_attempt(settings, job_id: str, number: int) -> None:
    update_job(
        job_store(settings.jobs_table, settings.region),
        job_id,
        lambda job: job.model_copy(update={"attempts": [*job.attempts, _attempt(number)]}),
    )


def _write(settings, job_id: str, attempt: int, *lines: str) -> None:
    logs = boto3.client("logs")
    group, stream = log_group(settings.jobs_bucket), log_stream(job_id, attempt)
    if not logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"]:
        logs.create_log_group(logGroupName=group)
    if not logs.describe_log_streams(logGroupName=group, logStreamNamePrefix=stream)["logStreams"]:
        logs.create_log_stream(logGroupName=group, logStreamName=stream)
    now = int(utc_now().timestamp() * 1000)
    events = [{"timestamp": now, "message": line} for line in lines]
    logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)


def _logs(context, job_id: str, **query: object):
    return call(context, "GET", f"/jobs/{job_id}/logs", query=urllib.parse.urlencode(query))


def test_the_cursor_gives_only_new_lines_and_moves_on_to_the_next_attempt(deployment, lambda_context):
    # Given a training job whose attempt 1 has shipped 5 lines to its live stream
    job_id = _training_job(deployment, lambda_context)
    _write(deployment, job_id, 1, *(f"step {n}" for n in range(5)))

    # When its tail is read
    first = _logs(lambda_context, job_id, tail=2)

    # Then the last 2 lines come from the stream, earlier ones left out, with a cursor after them
    assert first.status == 200
    [entry] = first.body["logs"]
    assert (entry["source"], entry["lines"], entry["truncated"]) == ("live", ["step 3", "step 4"], True)
    assert entry["stream"] == log_stream(job_id, 1)

    # When more lines come, the job moves to attempt 2 which writes too, and the cursor is given back
    _write(deployment, job_id, 1, "step 5")
    _add_attempt(deployment, job_id, 2)
    _write(deployment, job_id, 2, "resumed at step 5", "step 6")
    second = _logs(lambda_context, job_id, next_token=first.body["next_token"])

    # Then only the new lines come: the rest of attempt 1, then attempt 2 from its start
    assert [(e["attempt"], e["lines"]) for e in second.body["logs"]] == [
        (1, ["step 5"]),
        (2, ["resumed at step 5", "step 6"]),
    ]

    # And with nothing new, nothing comes and the cursor stays where it was
    third = _logs(lambda_context, job_id, next_token=second.body["next_token"])
    assert [line for e in third.body["logs"] for line in e["lines"]] == []
    assert third.body["next_token"] == second.body["next_token"]


def test_without_a_stream_the_s3_copy_is_read_and_a_foreign_cursor_is_refused(deployment, lambda_context):
    # Given an attempt whose stream is gone (expired) but whose S3 copy was uploaded at its end
    job_id = _training_job(deployment, lambda_context)
    boto3.client("s3").put_object(Bucket=deployment.jobs_bucket, Key=log_key(job_id, 1), Body=b"a\nb\nc\n")

    # When the logs are read, and then with a cursor that this API never gave
    answer = _logs(lambda_context, job_id, tail=5)
    bad = _logs(lambda_context, job_id, next_token="not-a-cursor")

    # Then the S3 copy answers, and the cursor is refused with 400
    [entry] = answer.body["logs"]
    assert (entry["source"], entry["lines"]) == ("s3", ["a", "b", "c"])
    assert bad.status == 400
    assert "next_token" in bad.body["message"]

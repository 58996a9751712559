"""The REST API's function against moto: submitting, listing and showing jobs, and refusing bad input."""

from __future__ import annotations

from datetime import timedelta

import boto3
import pytest

from spotrun.aws.adapters import job_store
from spotrun.model.job.record import JobStatus, ManifestSource, new_job, transition, utc_now
from tests.integration.api_client import TINY, call


def executions(settings) -> list[dict]:
    client = boto3.client("stepfunctions")
    return client.list_executions(stateMachineArn=settings.state_machine_arn)["executions"]


def stored_jobs(settings) -> list:
    jobs, _ = job_store(settings.jobs_table, settings.region).list_jobs(limit=100)
    return jobs


def test_post_starts_the_job_and_answers_202_with_its_id(deployment, lambda_context):
    # Given a valid manifest
    # When it is posted
    answer = call(lambda_context, "POST", "/jobs", TINY)
    # Then the job is recorded as an API submission and its workflow runs under the job id
    assert answer.status == 202
    job_id = answer.body["job_id"]
    job = job_store(deployment.jobs_table, deployment.region).get(job_id)
    assert job.status == JobStatus.SUBMITTED
    assert job.source.kind == "api"
    assert job.execution_arn == answer.body["execution_arn"]
    assert [e["name"] for e in executions(deployment)] == [job_id]


def test_a_retried_post_with_the_same_idempotency_key_starts_one_job(deployment, lambda_context):
    # Given a submission with an Idempotency-Key
    headers = {"Idempotency-Key": "retry-me-1"}
    first = call(lambda_context, "POST", "/jobs", TINY, headers=headers)
    # When the client retries it
    second = call(lambda_context, "POST", "/jobs", TINY, headers=headers)
    # Then both answers name the same job, and one execution runs
    assert first.status == second.status == 202
    assert second.body["job_id"] == first.body["job_id"]
    assert len(executions(deployment)) == 1
    records = boto3.client("dynamodb").scan(TableName=deployment.idempotency_table)["Items"]
    assert [record["status"]["S"] for record in records] == ["COMPLETED"]
    # And a new key is a new job
    third = call(lambda_context, "POST", "/jobs", TINY, headers={"Idempotency-Key": "another"})
    assert third.body["job_id"] != first.body["job_id"]
    assert len(executions(deployment)) == 2


def test_without_a_key_the_manifest_hash_identifies_the_submission(deployment, lambda_context):
    # Given a manifest posted twice without a key, once with its keys in another order
    first = call(lambda_context, "POST", "/jobs", TINY)
    second = call(lambda_context, "POST", "/jobs", {"training": TINY["training"], "name": "tiny"})
    # Then it is one job
    assert second.body["job_id"] == first.body["job_id"]
    assert len(executions(deployment)) == 1


def test_a_key_reused_with_another_manifest_is_refused(deployment, lambda_context):
    # Given a key already used
    call(lambda_context, "POST", "/jobs", TINY, headers={"Idempotency-Key": "k1"})
    # When it comes back with a different manifest
    other = {**TINY, "tags": {"team": "vision"}}
    answer = call(lambda_context, "POST", "/jobs", other, headers={"Idempotency-Key": "k1"})
    # Then the API refuses it and starts nothing more
    assert answer.status == 409
    assert "Idempotency-Key" in answer.body["message"]
    assert len(executions(deployment)) == 1


@pytest.mark.parametrize(
    ("body", "status", "expected"),
    [
        (b'{"name": "tiny", ', 400, "not valid JSON"),
        ({"name": "Not Valid", "training": {"command": "python train.py"}}, 422, "training.command"),
        ({"training": {"command": ["python"]}}, 422, "name: required field is missing"),
        ({**TINY, "resources": {"gpus_per_node": 3}}, 422, "resources:"),
        ({**TINY, "padding": "x" * 300_000}, 413, "limit is 262144"),
    ],
    ids=["malformed", "invalid-fields", "missing-name", "no-type-fits", "oversized"],
)
def test_bad_bodies_get_a_4xx_naming_the_problem_and_change_nothing(
    deployment, lambda_context, body, status, expected
):
    # Given a body that cannot be accepted
    # When it is posted
    answer = call(lambda_context, "POST", "/jobs", body)
    # Then the answer names the problem, and nothing is stored or started
    assert answer.status == status
    assert expected in answer.body["message"] + "\n".join(answer.body["errors"])
    assert stored_jobs(deployment) == []
    assert executions(deployment) == []


def _seed(settings, count: int) -> list[str]:
    store = job_store(settings.jobs_table, settings.region)
    start = utc_now() - timedelta(hours=1)
    ids = []
    for index in range(count):
        at = start + timedelta(minutes=index)
        name = "even" if index % 2 == 0 else "odd"
        job = new_job(f"{name}-{index:04d}", name, ManifestSource(kind="api", key=str(index)), None, at)
        if index % 3 == 0:
            job = transition(job, JobStatus.FAILED, at)
        store.create(job)
        ids.append(job.job_id)
    return ids


def test_list_filters_by_status_and_name_newest_first(deployment, lambda_context):
    # Given jobs of two names, some failed
    ids = _seed(deployment, 7)
    # When the list is asked for failed "even" jobs
    answer = call(lambda_context, "GET", "/jobs", query="status=FAILED&name=even")
    # Then it holds exactly those, newest first
    assert answer.status == 200
    assert [job["job_id"] for job in answer.body["jobs"]] == [ids[6], ids[0]]
    assert answer.body["next_token"] is None


def test_list_pages_with_an_opaque_token_until_the_end(deployment, lambda_context):
    # Given seven jobs
    ids = _seed(deployment, 7)
    # When they are listed three at a time
    seen, token, pages = [], None, 0
    while True:
        query = "limit=3" + (f"&next_token={token}" if token else "")
        answer = call(lambda_context, "GET", "/jobs", query=query)
        seen += [job["job_id"] for job in answer.body["jobs"]]
        token, pages = answer.body["next_token"], pages + 1
        if token is None:
            break
    # Then every job comes once, newest first, over three pages
    assert seen == list(reversed(ids))
    assert pages == 3


@pytest.mark.parametrize(
    ("query", "status", "expected"),
    [
        ("next_token=bm90LWEtdG9rZW4", 400, "next_token"),
        ("status=SLEEPING", 422, "status"),
        ("limit=0", 422, "limit"),
    ],
)
def test_list_refuses_bad_parameters_naming_them(deployment, lambda_context, query, status, expected):
    # When the list is asked with a bad parameter
    answer = call(lambda_context, "GET", "/jobs", query=query)
    # Then the refusal names it
    assert answer.status == status
    assert expected in answer.body["message"] + "\n".join(answer.body["errors"])


def test_get_shows_status_timeline_and_attempts_but_never_the_task_token(deployment, lambda_context):
    # Given a submitted job holding a task token
    job_id = call(lambda_context, "POST", "/jobs", TINY).body["job_id"]
    store = job_store(deployment.jobs_table, deployment.region)
    job = store.get(job_id)
    store.save(job.model_copy(update={"task_token": "secret-token"}))
    # When it is shown
    answer = call(lambda_context, "GET", f"/jobs/{job_id}")
    # Then the record is there, without the token
    assert answer.status == 200
    assert answer.body["status"] == "SUBMITTED"
    assert [change["status"] for change in answer.body["timeline"]] == ["SUBMITTED"]
    assert answer.body["attempts"] == []
    assert "secret-token" not in str(answer.body)


def test_an_unknown_job_id_is_a_404_naming_it(deployment, lambda_context):
    # When a job that does not exist is asked for
    answer = call(lambda_context, "GET", "/jobs/nope-123")
    # Then the answer names it
    assert answer.status == 404
    assert "nope-123" in answer.body["message"]


def test_the_same_submission_while_the_first_is_still_handled_is_refused_for_now(
    deployment, lambda_context, monkeypatch
):
    # Given a submission that, while it is being handled, is sent again with the same key (POST /jobs imports the
    # use case from its module at each request)
    from spotrun.control import submission

    submit, again = submission.submit_api_manifest, []

    def sent_again_meanwhile(*args, **kwargs):
        again.append(call(lambda_context, "POST", "/jobs", TINY, headers={"Idempotency-Key": "k-busy"}))
        return submit(*args, **kwargs)

    monkeypatch.setattr(submission, "submit_api_manifest", sent_again_meanwhile)
    # When the first completes
    first = call(lambda_context, "POST", "/jobs", TINY, headers={"Idempotency-Key": "k-busy"})
    # Then it started the job, and the second was told to retry, having started nothing
    assert first.status == 202
    [second] = again
    assert second.status == 409
    assert "still being handled" in second.body["message"]
    assert len(executions(deployment)) == 1

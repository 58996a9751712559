"""Job status changes reach the deployment's EventBridge bus: once per change, without the task token."""

import json

import pytest

from functions.finalize import handler as finalize
from spotrun.aws.adapters import job_store
from spotrun.model.errors import ConcurrentUpdate
from spotrun.model.job.record import JobStatus, transition, utc_now

REGION = "us-east-1"


def test_a_status_change_is_published_once_with_the_job_and_its_previous_status(
    deployment, job_id, published, lambda_context
):
    # Given a submitted job whose step holds a task token
    store = job_store(deployment.jobs_table, deployment.region)
    job = store.get(job_id)
    store.save(job.model_copy(update={"task_token": "secret-token"}))

    # When the workflow finalizes it as failed, twice (a retried Lambda invocation)
    for _ in range(2):
        finalize(
            {"job_id": job_id, "outcome": "FAILED", "error": {"Error": "Training.Failed"}}, lambda_context
        )

    # Then exactly one event says SUBMITTED -> FAILED, with the error, and nothing carries the token
    (event,) = published()
    assert event["source"] == "spotrun"
    assert event["detail-type"] == "Spotrun Job Status Change"
    detail = event["detail"]
    assert (detail["job_id"], detail["name"]) == (job_id, "tiny")
    assert (detail["previous_status"], detail["status"]) == ("SUBMITTED", "FAILED")
    assert detail["attempt"] is None
    assert detail["error"]["type"] == "Training.Failed"
    assert "secret-token" not in json.dumps(event)


def test_a_write_that_lost_a_race_publishes_nothing(deployment, job_id, published):
    # Given two readers of the same job on a publishing store
    store = job_store(deployment.jobs_table, deployment.region, deployment.event_bus_name)
    first, second = store.get(job_id), store.get(job_id)

    # When the first moves it to ACQUIRING and the second, now stale, tries to fail it
    store.save(transition(first, JobStatus.ACQUIRING, utc_now()))
    with pytest.raises(ConcurrentUpdate):
        store.save(transition(second, JobStatus.FAILED, utc_now()))

    # Then only the change that was written is published
    assert [event["detail"]["status"] for event in published()] == ["ACQUIRING"]


def test_a_failure_to_publish_never_fails_the_write(deployment, job_id):
    # Given a store whose bus does not exist
    store = job_store(deployment.jobs_table, deployment.region, "no-such-bus")

    # When a status change is written
    written = store.save(transition(store.get(job_id), JobStatus.ACQUIRING, utc_now()))

    # Then the write stands
    assert store.get(job_id).status is JobStatus.ACQUIRING
    assert written.status is JobStatus.ACQUIRING

"""Scheduled retraining end to end: a schedule fires in scaled time, starts a job, then skips unchanged data."""

from __future__ import annotations

import time

from spotrun.local.demo import wait_for_job
from spotrun.model.job.record import JobStatus
from spotrun.model.manifest.parse import parse_manifest_text
from tests.e2e.conftest import example_manifest
from tests.integration.api_client import call
from tests.lambda_context import lambda_context

NAME = "tiny-regression"
JOB_TIMEOUT = 120


def scheduled_manifest() -> dict:
    text = example_manifest(
        **{
            'command: [python, train.py, --step-seconds, "0.02"]': 'command: [python, train.py, --steps, "30"]'
        }
    )
    document = parse_manifest_text(text).model_dump(mode="json", exclude_none=True)
    document["schedule"] = {"expression": "rate(1 minute)", "only_if_data_changed": True}
    return document


def wait_until(condition, timeout: float, poll: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError("timed out")


def test_a_schedule_fires_a_job_then_skips_a_run_whose_data_did_not_change(runtime):
    context = lambda_context()
    # Given a schedule, rate(1 minute), created through the API (a minute lasts 1.2 s at this time scale)
    created = call(context, "POST", "/schedules", scheduled_manifest())
    assert created.status == 201, created.body
    assert created.body["expression"] == "rate(1 minute)"

    # When it fires by itself
    wait_until(lambda: runtime.scheduler.fired, timeout=10)
    # (paused after its first firing, so that the next ones are the test's own)
    scheduler = runtime.client("scheduler")
    detail = scheduler.get_schedule(Name=NAME, GroupName=runtime.settings.schedule_group)
    scheduler.update_schedule(
        Name=NAME,
        GroupName=detail["GroupName"],
        ScheduleExpression=detail["ScheduleExpression"],
        FlexibleTimeWindow=detail["FlexibleTimeWindow"],
        Target=detail["Target"],
        State="DISABLED",
    )
    first = wait_until(lambda: call(context, "GET", f"/schedules/{NAME}/runs").body["runs"], timeout=10)

    # Then its run started a job, which succeeds
    assert first[-1]["outcome"] == "started"
    job = wait_for_job(runtime, first[-1]["job_id"], timeout=JOB_TIMEOUT)
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert job.source.kind == "schedule"

    # When it fires again with the inputs unchanged
    answer = runtime.fire_schedule(NAME)

    # Then that run is skipped, and the skip recorded with its reason
    assert answer["error"] is None, answer
    assert answer["payload"]["outcome"] == "skipped"
    runs = call(context, "GET", f"/schedules/{NAME}/runs").body["runs"]
    skipped = [run for run in runs if run["outcome"] == "skipped"]
    assert len(skipped) == 1
    assert "inputs unchanged" in skipped[0]["reason"]

    # When the schedule is deleted
    assert call(context, "DELETE", f"/schedules/{NAME}").status == 204

    # Then it is gone, and no instance is left running
    assert NAME not in [item["name"] for item in call(context, "GET", "/schedules").body["schedules"]]
    assert call(context, "DELETE", f"/schedules/{NAME}").status == 404
    assert runtime.running_instance_ids() == []

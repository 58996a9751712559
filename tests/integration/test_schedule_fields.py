"""`schedule.timezone` through the API into EventBridge Scheduler (moto)."""

import boto3

from tests.integration.api_client import TINY, call

REGION = "us-east-1"


def test_a_schedule_posted_with_a_time_zone_is_created_in_it(deployment, lambda_context):
    # Given a weekday 03:00 schedule in Paris
    manifest = {
        **TINY,
        "name": "paris-nightly",
        "schedule": {"expression": "cron(0 3 ? * MON-FRI *)", "timezone": "Europe/Paris"},
    }

    # When it is created through the API
    created = call(lambda_context, "POST", "/schedules", manifest)

    # Then the answer and Scheduler's schedule are both in that zone
    assert created.status == 201, created.body
    assert created.body["timezone"] == "Europe/Paris"
    detail = boto3.client("scheduler", region_name=REGION).get_schedule(
        Name="paris-nightly", GroupName=deployment.schedule_group
    )
    assert detail["ScheduleExpressionTimezone"] == "Europe/Paris"
    # And the listing reads it back from Scheduler
    listed = call(lambda_context, "GET", "/schedules").body["schedules"]
    assert [(item["name"], item["timezone"]) for item in listed] == [("paris-nightly", "Europe/Paris")]

"""Requests the API cannot take: a body not sent as JSON, a method a path does not have, no body at all."""

from __future__ import annotations

import json

import boto3
import pytest

from tests.integration.api_client import TINY, call

SCHEDULED = {**TINY, "schedule": {"expression": "rate(1 day)"}}


def nothing_stored(settings) -> bool:
    jobs = boto3.client("dynamodb").scan(TableName=settings.jobs_table)["Items"]
    schedules = boto3.client("scheduler").list_schedules(GroupName=settings.schedule_group)["Schedules"]
    return jobs == [] and schedules == []


@pytest.mark.parametrize("path", ["/jobs", "/schedules"])
@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain", json.dumps(SCHEDULED).encode()),
        ("text/plain", b""),
        ("application/x-www-form-urlencoded", b"name=tiny&training=x"),
        ("application/xml", b"<manifest/>"),
    ],
    ids=["json-as-text", "empty-text", "form", "xml"],
)
def test_a_body_not_sent_as_json_is_a_415_and_changes_nothing(
    deployment, lambda_context, path, content_type, body
):
    # Given a manifest sent with another media type
    # When it is posted
    answer = call(lambda_context, "POST", path, body, headers={"Content-Type": content_type})
    # Then it is refused as an unsupported media type, naming JSON, and nothing is created
    assert answer.status == 415
    assert "application/json" in answer.body["message"]
    assert nothing_stored(deployment)


@pytest.mark.parametrize("path", ["/jobs", "/schedules"])
def test_a_post_without_a_body_is_a_422_naming_the_manifest(deployment, lambda_context, path):
    # Given no body at all
    # When it is posted
    answer = call(lambda_context, "POST", path, None)
    # Then the manifest is named as missing, and nothing is created
    assert (answer.status, answer.body["errors"]) == (422, ["(manifest): required field is missing"])
    assert nothing_stored(deployment)


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("TRACE", "/jobs", "GET, POST"),
        ("PUT", "/jobs/tiny-0123", "DELETE, GET"),
        ("PATCH", "/schedules/nightly", "DELETE"),
        ("DELETE", "/jobs/tiny-0123/logs", "GET"),
    ],
)
def test_a_method_a_path_does_not_have_is_a_405_listing_those_it_has(
    deployment, lambda_context, method, path, allowed
):
    # Given a path that exists, and a method it does not take
    # When the request is sent
    answer = call(lambda_context, method, path)
    # Then it is a 405 whose Allow header and message list the path's methods
    assert answer.status == 405
    assert answer.headers["Allow"] == allowed
    assert allowed in answer.body["message"]


def test_a_path_with_a_trailing_newline_is_no_route_of_the_api(deployment, lambda_context):
    # Given a schedule name that is only a newline (DELETE /schedules/%0A, found by schemathesis)
    # When it is deleted
    answer = call(lambda_context, "DELETE", "/schedules/\n")
    # Then it is a 404 like any path no route has, not a 405 for /schedules
    assert answer.status == 404


def test_a_job_id_that_is_only_a_newline_is_no_job_and_not_the_list(deployment, lambda_context):
    # Given a job id that is only a newline (GET /jobs/%0A, found by schemathesis: a rule's "$" matches before a
    # trailing newline, so Powertools alone answers it as GET /jobs)
    # When it is asked for
    answer = call(lambda_context, "GET", "/jobs/\n")
    # Then it is a 404 that names the path, not the list of jobs
    assert answer.status == 404
    assert "jobs" not in answer.body
    assert "'/jobs/\\n'" in answer.body["message"]


def test_an_unknown_path_is_still_a_404(deployment, lambda_context):
    # Given / When a path no route has is requested with any method
    # Then it is a 404
    assert call(lambda_context, "TRACE", "/nowhere").status == 404

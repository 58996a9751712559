"""What the API answers without a body is what openapi.json documents without content."""

from __future__ import annotations

import json

from functions.api import app as api
from functions.api.openapi import OPENAPI_FILE
from spotrun.local.api.gateway import rest_event
from tests.integration.api_client import TINY, call

SCHEDULE = {**TINY, "name": "nightly", "schedule": {"expression": "cron(0 3 ? * MON-FRI *)"}}


def test_deleting_a_schedule_answers_as_documented(deployment, lambda_context):
    # Given a schedule, and what the committed document says DELETE /schedules/{name} answers
    assert call(lambda_context, "POST", "/schedules", SCHEDULE).status == 201
    document = json.loads(OPENAPI_FILE.read_text(encoding="utf-8"))
    documented = document["paths"]["/schedules/{name}"]["delete"]["responses"]

    # When it is deleted
    answer = api.handler(rest_event("DELETE", "/schedules/nightly", "", {}, b""), lambda_context)

    # Then the answer is a 204 with no body and no content type, and the document says 204 with no content
    assert answer["statusCode"] == 204
    assert not answer.get("body")
    headers = {name.lower() for name in (answer.get("headers") or {})}
    assert "content-type" not in headers
    assert "204" in documented
    assert "content" not in documented["204"]

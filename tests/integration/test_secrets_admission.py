"""Every entry point refuses a training.secrets reference outside the deployment's allowed ones, from the settings
the functions read (the S3 drop, POST /jobs, POST /schedules, and POST /plan says so), and admits one inside them."""

from __future__ import annotations

import json

from functions import submit
from functions.runtime import reset
from spotrun.aws.adapters import job_store
from tests.integration.api_client import TINY, call
from tests.integration.test_intake_entry_points import report_of
from tests.integration.test_submit_handler import put, s3_event

ALLOWED = "arn:aws:secretsmanager:us-east-1:123456789012:secret:training/*"
INSIDE = "arn:aws:secretsmanager:us-east-1:123456789012:secret:training/db-AbCdEf"
OUTSIDE = "arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/db-AbCdEf"
REFUSED = f"training.secrets.DB: {OUTSIDE} is not a reference this deployment allows (allowed: {ALLOWED})"


def with_secret(reference: str, **extra: object) -> dict:
    return {**TINY, "training": {**TINY["training"], "secrets": {"DB": reference}}, **extra}


def test_each_entry_point_refuses_a_reference_outside_the_deployments_and_admits_one_inside(
    deployment, lambda_context, monkeypatch
):
    # Given a deployment allowing the secrets under training/ (the functions' setting)
    monkeypatch.setenv("SPOTRUN_REFERENCE_PATTERNS", ALLOWED)
    reset()

    # When a manifest naming one outside is posted, scheduled and dropped, and one naming a secret inside posted
    posted = call(lambda_context, "POST", "/jobs", with_secret(OUTSIDE))
    nightly = {"expression": "cron(0 3 ? * MON *)"}
    scheduled = call(lambda_context, "POST", "/schedules", with_secret(OUTSIDE, schedule=nightly))
    key = "manifests/outside.json"
    etag = put(deployment, key, json.dumps(with_secret(OUTSIDE)).encode())
    dropped = submit.handler(s3_event(deployment.jobs_bucket, key, etag), lambda_context)
    admitted = call(lambda_context, "POST", "/jobs", with_secret(INSIDE))

    # Then the three refuse it naming the reference and the allowed patterns, and the other starts
    assert posted.status == 422
    assert any(line.startswith(REFUSED) for line in posted.body["errors"])
    assert scheduled.status == 422
    assert any(line.startswith(REFUSED) for line in scheduled.body["errors"])
    assert dropped["outcome"] == "rejected"
    assert any(line.startswith(REFUSED) for line in report_of(deployment, key)["errors"])
    assert admitted.status == 202, admitted.body
    # and its record keeps the reference
    job = job_store(deployment.jobs_table, deployment.region).get(admitted.body["job_id"])
    assert job is not None
    assert job.require_manifest().training.secrets == {"DB": INSIDE}


def test_the_plan_judges_a_secret_by_the_deployments_allowed_references(
    deployment, lambda_context, monkeypatch
):
    # Given a deployment allowing the secrets under training/ (the API function's setting)
    monkeypatch.setenv("SPOTRUN_REFERENCE_PATTERNS", ALLOWED)
    reset()

    # When manifests naming a secret inside and one outside are planned
    inside = call(lambda_context, "POST", "/plan", with_secret(INSIDE))
    outside = call(lambda_context, "POST", "/plan", with_secret(OUTSIDE))

    # Then the plan finds no secrets problem with the one inside, and names the one outside, as POST /jobs would
    assert inside.status == outside.status == 200
    assert not any(line.startswith("training.secrets") for line in inside.body["problems"]), inside.body
    assert any(line.startswith(REFUSED) for line in outside.body["problems"])

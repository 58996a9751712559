"""Property-based: schemathesis drives the API function with requests generated from openapi.json.

The function runs in process behind the same REST-proxy adapter ``spotrun local up`` serves (a WSGI app), on
moto. Every answer must be a documented status with a body matching its schema, and never a 5xx.
"""

from __future__ import annotations

import boto3
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from functions import api
from functions.api import EXAMPLE_JOB_ID
from spotrun.aws import job_store
from spotrun.job import ArchivedObject, Attempt, JobStatus, ManifestSource, new_job, transition, utc_now
from spotrun.layout import log_key
from spotrun.local.api_gateway import ProxyApp
from spotrun.openapi import OPENAPI_FILE

POSITIVE_EXAMPLES = 10  # per operation: requests the document allows
NEGATIVE_EXAMPLES = 5  # per operation: requests that break it (bad types, missing fields, ...)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def seed_example_job(settings) -> None:
    """The job the document's path examples name: training, with a log and an archived object."""
    now = utc_now()
    job = new_job(EXAMPLE_JOB_ID, "tiny-regression", ManifestSource(kind="api", key="k"), None, now)
    job = transition(job, JobStatus.ACQUIRING, now)
    attempt = Attempt(
        number=1,
        instance_id="i-0123456789abcdef0",
        instance_type="g5.xlarge",
        availability_zone="us-east-1a",
        lifecycle="spot",
        price_per_hour=0.4,
        started_at=now,
    )
    uri = f"s3://{settings.archive_bucket}/models/{EXAMPLE_JOB_ID}/model.npy"
    job = transition(job, JobStatus.BOOTING, now).model_copy(
        update={
            "attempts": [attempt],
            "archive": [ArchivedObject(uri=uri, storage_class="GLACIER", size=1, sha256="0" * 64)],
        }
    )
    job_store(settings.jobs_table, settings.region).create(job)
    s3 = boto3.client("s3")
    s3.put_object(Bucket=settings.jobs_bucket, Key=log_key(EXAMPLE_JOB_ID, 1), Body=b"step 1\nstep 2\n")
    s3.put_object(Bucket=settings.archive_bucket, Key=uri.split("/", 3)[3], Body=b"x", StorageClass="GLACIER")


def operations():
    schema = schemathesis.openapi.from_path(OPENAPI_FILE)
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.timeout(180)
def test_generated_requests_get_no_5xx_and_only_documented_answers(deployment):
    # Given the committed OpenAPI document, the API function behind the REST proxy adapter, and the job
    # that the document's examples name
    seed_example_job(deployment)
    found = operations()
    app = ProxyApp(api.handler)
    assert len(found) == 11

    for operation in found:
        strategies = [
            *((strategy, 2) for strategy in operation.schema.get_strategies_from_examples(operation)),
            (operation.as_strategy(), POSITIVE_EXAMPLES),
            (operation.as_strategy(generation_mode=GenerationMode.NEGATIVE), NEGATIVE_EXAMPLES),
        ]
        for strategy, count in strategies:
            exercise(strategy, count, app)


def exercise(strategy, count: int, app: ProxyApp) -> None:
    @settings(
        max_examples=count,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def check(case) -> None:
        # When a generated request is sent
        response = case.call(app=app)
        # Then the answer is no server error, and its status, content type and body are documented
        case.validate_response(response, checks=CHECKS)

    check()

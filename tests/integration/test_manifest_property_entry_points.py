"""Property, through the real handlers against moto: whatever is POSTed to /jobs or dropped under manifests/,
the answer is a started job or a refusal naming the problem, never a 5xx or an exception (bounded examples)."""

from __future__ import annotations

import json

import boto3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions import submit
from spotrun.aws.adapters import job_store
from tests.integration.api_client import call
from tests.integration.test_submit_handler import s3_event
from tests.unit.manifest_strategies import manifest_inputs, mutated_documents, render, text_mutations

BOUNDED = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# The submit function's path (S3 put, Powertools decorators) is slower per example: fewer of them.
FEWER = settings(BOUNDED, max_examples=15)
JSON_BODIES = st.one_of(
    st.builds(render, mutated_documents(), st.just(True)),
    text_mutations(json.dumps(json.loads(json.dumps({"name": "tiny", "training": {"command": ["python"]}})))),
    manifest_inputs(),
)


def _as_bytes(text: str | bytes) -> bytes:
    return text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text


@BOUNDED
@given(body=JSON_BODIES)
def test_every_posted_body_is_started_or_refused_by_name(deployment, lambda_context, body):
    # When anything is POSTed to /jobs
    answer = call(lambda_context, "POST", "/jobs", _as_bytes(body))
    # Then it is a started job, or a 4xx naming the problem
    assert answer.status in {202, 400, 413, 422}, answer.body
    if answer.status == 202:
        assert answer.body["job_id"]
    else:
        # The message names the problem (a 422 lists each field too)
        assert answer.body["message"]
        assert answer.status != 422 or answer.body["errors"]


@FEWER
@given(body=manifest_inputs())
def test_every_dropped_object_is_started_or_rejected_beside_itself(deployment, lambda_context, body):
    # Given anything put under manifests/
    raw = _as_bytes(body)
    key = "manifests/property.yaml"
    s3 = boto3.client("s3")
    etag = s3.put_object(Bucket=deployment.jobs_bucket, Key=key, Body=raw)["ETag"].strip('"')
    event = s3_event(deployment.jobs_bucket, key, etag)
    event["detail"]["object"]["size"] = len(raw)
    # When the submit function handles its event
    result = submit.handler(event, lambda_context)
    # Then a job started, or a report beside it and the record name each problem
    job = job_store(deployment.jobs_table, deployment.region).get(result["job_id"])
    assert job is not None
    if result["outcome"] == "started":
        return
    assert result["outcome"] in {"rejected", "duplicate"}
    report = json.loads(
        s3.get_object(Bucket=deployment.jobs_bucket, Key=key + ".rejected.json")["Body"].read()
    )
    assert report["errors"]
    assert all(": " in line for line in report["errors"])

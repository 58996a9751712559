"""GET /jobs/{id}/telemetry through the API function against moto: the series its agents put, or a 404."""

from __future__ import annotations

import json

import boto3

from spotrun.model.layout import telemetry_key
from tests.integration.api_client import TINY, call


def test_the_telemetry_route_answers_the_series_the_agents_put(deployment, lambda_context):
    # Given a job whose agent put two parts: a loss at steps 10 and 20, and a GPU sample at 95 % memory
    job_id = call(lambda_context, "POST", "/jobs", TINY).body["job_id"]
    s3 = boto3.client("s3")
    first = [
        {"kind": "metrics", "at": "2026-12-07T12:00:00Z", "step": 10, "values": {"loss": 0.5}},
        {
            "kind": "gpu",
            "at": "2026-12-07T12:00:01Z",
            "gpus": [{"index": 0, "utilization": 97, "memory_used_mib": 22800, "memory_total_mib": 24000}],
        },
    ]
    second = [{"kind": "metrics", "at": "2026-12-07T12:00:30Z", "step": 20, "values": {"loss": 0.25}}]
    for part, lines in ((1, first), (2, second)):
        body = "\n".join(json.dumps(line) for line in lines) + "\nnot a line\n"
        s3.put_object(
            Bucket=deployment.jobs_bucket, Key=telemetry_key(job_id, 1, 0, part), Body=body.encode()
        )
    # When its telemetry is asked for
    answer = call(lambda_context, "GET", f"/jobs/{job_id}/telemetry")
    # Then the series come back in time order, the bad lines counted, the reading's memory in percent
    assert answer.status == 200
    assert [(p["step"], p["value"]) for p in answer.body["metrics"]["loss"]] == [(10, 0.5), (20, 0.25)]
    assert [(p["gpu"], p["utilization"], p["memory_percent"]) for p in answer.body["gpu"]] == [
        (0, 97.0, 95.0)
    ]
    assert answer.body["skipped_lines"] == 2
    assert (answer.body["parts"], answer.body["parts_read"]) == (2, 2)


def test_an_unknown_jobs_telemetry_is_a_404(deployment, lambda_context):
    # When the telemetry of a job that does not exist is asked for
    answer = call(lambda_context, "GET", "/jobs/nope-0123456789ab/telemetry")
    # Then the API answers 404 with its error body
    assert answer.status == 404
    assert "nope-0123456789ab" in answer.body["message"]

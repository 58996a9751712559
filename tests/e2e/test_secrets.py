"""training.secrets end to end in the emulator: the value reaches the command, and appears nowhere else.

One small job (the tiny-regression example, 20 steps) reads a Secrets Manager secret (a second, beside it, names
one that does not exist and ends Secrets.Unavailable): its script prints the
value (which the agent must mask) and writes the value's sha256 to an output. The test then searches for the
value everything that left the instance or that the control plane keeps: the job's record, every object of the
jobs bucket (the uploaded logs among them), every CloudWatch Logs event (the live logs), the job's events on
the bus, the workflow's execution history, and the API's answers about the job.
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
import uuid
from typing import Any

from spotrun.aws.adapters import job_store
from spotrun.local.demo import drop_manifest, wait_for_job
from spotrun.local.runtime import LocalRuntime
from spotrun.model import layout
from spotrun.model.job.record import JobStatus
from tests.e2e.conftest import assert_nothing_left_running, example_manifest
from tests.sigv4 import signed_request

JOB_TIMEOUT = 120
COMMAND = 'command: [python, train.py, --step-seconds, "0.02"]'
# Prints the value (the agent masks it), proves it by its digest among the outputs, then trains 20 steps.
SCRIPT = (
    "import hashlib, os, pathlib, runpy, sys; value = os.environ['DB_PASSWORD']; print('the secret is', value); "
    "out = pathlib.Path(os.environ['SPOTRUN_OUTPUT_DIR']); out.mkdir(parents=True, exist_ok=True); "
    "(out / 'secret.sha256').write_text(hashlib.sha256(value.encode()).hexdigest()); "
    "sys.argv = ['train.py', '--steps', '20']; runpy.run_path('train.py', run_name='__main__')"
)


def events_queue(runtime: LocalRuntime) -> Any:
    """Every event of source spotrun on the deployment's bus, into a queue; returns a function draining it."""
    sqs = runtime.client("sqs")
    url = sqs.create_queue(QueueName="secret-job-events")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events = runtime.client("events")
    bus = runtime.settings.event_bus_name
    events.put_rule(Name="secret-job-events", EventBusName=bus, EventPattern='{"source": ["spotrun"]}')
    events.put_targets(Rule="secret-job-events", EventBusName=bus, Targets=[{"Id": "q", "Arn": arn}])

    def drain() -> list[str]:
        bodies: list[str] = []
        while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
            bodies += [message["Body"] for message in batch]
            sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)],
            )
        return bodies

    return drain


def bucket_texts(runtime: LocalRuntime) -> dict[str, bytes]:
    s3 = runtime.client("s3")
    bucket = runtime.settings.jobs_bucket
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for o in page.get("Contents", [])
    ]
    return {key: s3.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}


def log_events(runtime: LocalRuntime) -> list[str]:
    # Every page of every group: a value on a later page must be found too.
    logs = runtime.client("logs")
    messages: list[str] = []
    for groups in logs.get_paginator("describe_log_groups").paginate():
        for group in groups.get("logGroups", []):
            for page in logs.get_paginator("filter_log_events").paginate(logGroupName=group["logGroupName"]):
                messages += [event["message"] for event in page.get("events", [])]
    return messages


def api(runtime: LocalRuntime, path: str) -> str:
    # Signed as the CLI signs it: the stand-in, like API Gateway, refuses an unsigned call.
    with urllib.request.urlopen(signed_request(f"{runtime.api_url}{path}"), timeout=30) as answer:  # noqa: S310
        return str(answer.read().decode())


def test_a_secret_reaches_the_command_and_appears_nowhere_else(runtime: LocalRuntime) -> None:
    # Given a secret in the emulator's Secrets Manager (under spotrun/, which the local deployment allows),
    # and a job naming it in training.secrets
    value = f"e2e-{uuid.uuid4().hex}"
    arn = runtime.client("secretsmanager").create_secret(Name="spotrun/e2e-db", SecretString=value)["ARN"]
    manifest = example_manifest(
        **{
            "name: tiny-regression": "name: secret-job",
            COMMAND: f"command: [python, -c, {json.dumps(SCRIPT)}]\n  secrets:\n    DB_PASSWORD: {arn}",
        }
    )
    # and a second job naming a secret that does not exist (allowed by the deployment, so admitted)
    missing = arn.replace("spotrun/e2e-db", "spotrun/e2e-gone")
    unreadable = example_manifest(
        **{"name: tiny-regression": "name: secret-gone", COMMAND: f"{COMMAND}\n  secrets:\n    DB: {missing}"}
    )
    drain = events_queue(runtime)

    # When both run (side by side)
    submitted = drop_manifest(runtime, manifest, "secret-job.yaml")
    gone = drop_manifest(runtime, unreadable, "secret-gone.yaml")
    job = wait_for_job(runtime, submitted.job_id, timeout=JOB_TIMEOUT)
    failed = wait_for_job(runtime, gone.job_id, timeout=JOB_TIMEOUT)

    # Then the second ended Secrets.Unavailable naming the reference, on its one instance, which was released
    assert failed.status is JobStatus.FAILED
    assert failed.error is not None
    assert failed.error.type == "Secrets.Unavailable"
    assert f"training.secrets.DB: {missing} cannot be read" in failed.error.message
    assert len(failed.attempts) == 1
    assert_nothing_left_running(runtime, failed)

    # and the first succeeded, and its command had the value: the digest it wrote is the value's
    assert job.status is JobStatus.SUCCEEDED, job.error
    objects = bucket_texts(runtime)
    digest = objects[f"{layout.output_prefix(job.job_id)}secret.sha256"].decode()
    assert digest == hashlib.sha256(value.encode()).hexdigest()
    # and its log shows the line printed, with the value masked (the last attempt's: one may have been lost)
    log = objects[layout.log_key(job.job_id, job.attempts[-1].number)].decode()
    assert "the secret is ***" in log
    # and the record keeps the reference, not the value
    record = job_store(runtime.settings.jobs_table, runtime.region).get(job.job_id)
    assert record is not None
    assert record.require_manifest().training.secrets == {"DB_PASSWORD": arn}
    # and the value is nowhere: the record, the bucket, CloudWatch Logs, the events, the execution history,
    # the API's answers
    sfn = runtime.client("stepfunctions")
    execution = f"{runtime.settings.state_machine_arn.replace(':stateMachine:', ':execution:')}:{job.job_id}"
    history = sfn.get_execution_history(executionArn=execution, maxResults=1000)["events"]
    places = {
        "record": record.model_dump_json(),
        **{f"s3://{key}": body.decode("utf-8", errors="replace") for key, body in objects.items()},
        "logs": "\n".join(log_events(runtime)),
        "events": "\n".join(drain()),
        "history": json.dumps(history, default=str),
        "GET /jobs/{id}": api(runtime, f"/jobs/{job.job_id}"),
        "GET /jobs/{id}/logs": api(runtime, f"/jobs/{job.job_id}/logs?tail=500"),
        "GET /jobs": api(runtime, "/jobs"),
    }
    assert [place for place, text in places.items() if value in text] == []
    # (and each place searched holds the job: its events, and its command's masked line in the live logs and
    # the API's logs, so that a place read empty cannot pass)
    assert job.job_id in places["events"], "no event of the job was seen on the bus"
    assert "the secret is ***" in places["logs"], "the job's live log was not among the CloudWatch Logs read"
    assert "the secret is ***" in places["GET /jobs/{id}/logs"]
    assert job.job_id in places["history"]

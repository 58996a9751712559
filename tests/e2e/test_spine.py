"""The spine: one training job end to end through the control plane, offline."""

from __future__ import annotations

import json
import time

from spotrun.local.demo import EXAMPLE_DIR, drop_manifest, wait_for_job
from spotrun.model.job.record import JobStatus
from tests.e2e.conftest import example_manifest, instance_state, read_archived, sha256

JOB_TIMEOUT = 180


def test_example_job_succeeds_and_archives_the_model_a_direct_run_produces(runtime, direct_model):
    # Given the example's code and data in the jobs bucket
    # When its manifest is dropped under manifests/
    submitted = drop_manifest(runtime, (EXAMPLE_DIR / "manifest.yaml").read_bytes(), "spine-example.yaml")
    job = wait_for_job(runtime, submitted.job_id, timeout=JOB_TIMEOUT)

    # Then the job went through every state of the happy path and succeeded
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert [change.status for change in job.timeline] == [
        JobStatus.SUBMITTED,
        JobStatus.ACQUIRING,
        JobStatus.BOOTING,
        JobStatus.STAGING,
        JobStatus.TRAINING,
        JobStatus.ARCHIVING,
        JobStatus.SUCCEEDED,
    ]
    # And the archived model, restored from GLACIER, is byte-identical to the direct run's
    [model] = [item for item in job.archive if item.uri.endswith("/model.npy")]
    assert model.storage_class == "GLACIER"
    head = runtime.client("s3").head_object(
        Bucket=runtime.settings.archive_bucket, Key=model.uri.split("/", 3)[3]
    )
    assert head["StorageClass"] == "GLACIER"
    assert read_archived(runtime, model.uri) == direct_model
    assert job.model_sha256 == sha256(direct_model)
    # And it ran on one spot attempt of a requested GPU type, released at the end, and was costed
    [attempt] = job.attempts
    assert attempt.lifecycle == "spot"
    assert attempt.instance_type.split(".")[0] in {"g4dn", "g5", "g6"}
    assert attempt.end_reason == "completed"
    assert attempt.ended_at is not None
    assert instance_state(runtime, attempt.instance_id) in {"shutting-down", "terminated"}
    assert attempt.instance_id not in runtime.running_instance_ids()
    assert job.cost is not None
    assert 0 < job.cost.usd < job.cost.spot_at_on_demand_usd
    # what EC2 bills by the emulator's own launch and termination of the instance, at its pool's price, per
    # second with the 60-second minimum (the record rounds to 4 decimals; its times are read a moment apart)
    held = runtime.capacity.held(attempt.instance_id)
    assert held is not None
    assert held[1] is not None
    price = runtime.capacity.price(attempt.instance_type, attempt.availability_zone)
    billed = price * max(60.0, (held[1] - held[0]).total_seconds()) / 3600
    assert abs(job.cost.usd - billed) <= 0.5e-4 + price / 3600, (job.cost, held)
    assert 0 < job.cost.savings_pct < 100
    # priced at its pool's spot price, read from DescribeSpotPriceHistory (the emulator's capacity model)
    assert attempt.price_source == "spot-price-history"
    assert attempt.price_per_hour == runtime.capacity.price(attempt.instance_type, attempt.availability_zone)


def test_a_failing_training_command_fails_the_job_with_its_exit_code_and_log(runtime):
    # Given a job whose training command prints and exits 3
    manifest = example_manifest(
        **{
            'command: [python, train.py, --step-seconds, "0.02"]': (
                "command: [python, -c, \"print('loss exploded at step 7'); import sys; sys.exit(3)\"]"
            ),
            "restarts_on_error: 1": "restarts_on_error: 0",
            "name: tiny-regression": "name: failing-job",
        }
    )
    # When it is dropped
    submitted = drop_manifest(runtime, manifest, "failing-job.yaml")
    job = wait_for_job(runtime, submitted.job_id, timeout=JOB_TIMEOUT)

    # Then the job is FAILED with the exit code and the tail of the log
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.type == "Training.Failed"
    assert job.error.exit_code == 3
    assert "loss exploded at step 7" in (job.error.log_tail or "")
    # And its instance was released
    [attempt] = job.attempts
    assert attempt.end_reason == "failed"
    assert instance_state(runtime, attempt.instance_id) in {"shutting-down", "terminated"}
    assert attempt.instance_id not in runtime.running_instance_ids()


def test_an_invalid_manifest_is_rejected_where_it_was_dropped_and_starts_nothing(runtime):
    # Given a manifest with two mistakes
    manifest = b"name: Bad_Name\ntraining: {command: [python, train.py]}\nresources: {gpus_per_node: 0}\n"
    executions_before = _execution_names(runtime)
    # When it is dropped
    submitted = drop_manifest(runtime, manifest, "bad.yaml")
    job = wait_for_job(runtime, submitted.job_id, timeout=30)

    # Then a report beside it lists both problems, the store records the rejection, and nothing started
    report = _wait_for_object(runtime, "manifests/bad.yaml.rejected.json")
    assert report["status"] == "REJECTED"
    assert {line.split(":")[0] for line in report["errors"]} == {"name", "resources.gpus_per_node"}
    assert job.status is JobStatus.REJECTED
    assert _execution_names(runtime) == executions_before


def test_the_same_object_delivered_twice_starts_one_job(runtime):
    # Given a manifest dropped once, whose S3 event started a job
    manifest = example_manifest(
        **{"name: tiny-regression": "name: delivered-twice", '--step-seconds, "0.02"': '--steps, "20"'}
    )
    submitted = drop_manifest(runtime, manifest, "twice.yaml")
    # When EventBridge delivers the same object's event again
    runtime.publish_event(
        "aws.s3",
        "Object Created",
        {
            "version": "0",
            "bucket": {"name": runtime.settings.jobs_bucket},
            "object": {
                "key": submitted.key,
                "size": len(manifest),
                "etag": submitted.etag,
                "sequencer": "01",
            },
            "reason": "PutObject",
        },
        [f"arn:aws:s3:::{runtime.settings.jobs_bucket}"],
    )
    job = wait_for_job(runtime, submitted.job_id, timeout=JOB_TIMEOUT)

    # Then exactly one execution ran for it and one instance was used
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert _execution_names(runtime).count(submitted.job_id) == 1
    assert len(job.attempts) == 1


def _execution_names(runtime) -> list[str]:
    executions = runtime.client("stepfunctions").list_executions(
        stateMachineArn=runtime.settings.state_machine_arn
    )
    return [item["name"] for item in executions["executions"]]


def _wait_for_object(runtime, key: str, timeout: float = 30.0) -> dict:
    s3 = runtime.client("s3")
    deadline = time.monotonic() + timeout
    while True:
        try:
            return json.loads(s3.get_object(Bucket=runtime.settings.jobs_bucket, Key=key)["Body"].read())
        except s3.exceptions.NoSuchKey:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)

"""EC2 as AWS documents it, not as moto shows it: refusals that waiting cannot fix, and eventual consistency."""

from __future__ import annotations

import time

from spotrun.local.demo import EXAMPLE_DIR, drop_manifest, wait_for_job
from spotrun.model.job.record import JobStatus
from tests.e2e.conftest import example_manifest

JOB_TIMEOUT = 180
# The record's times are the control plane's (a Lambda's clock, read just before its EC2 call); the emulator's
# are taken inside that call.
BILLING_TOLERANCE_SECONDS = 0.5


def test_a_spot_quota_of_zero_fails_the_job_at_once_naming_the_quota(runtime):
    # Given an account whose Spot vCPU quota refuses every launch
    runtime.capacity.fleet_errors.inject("MaxSpotInstanceCountExceeded", count=50)
    try:
        started = time.monotonic()
        # When the example job is dropped
        submitted = drop_manifest(runtime, (EXAMPLE_DIR / "manifest.yaml").read_bytes(), "quota.yaml")
        job = wait_for_job(runtime, submitted.job_id, timeout=JOB_TIMEOUT)
        elapsed = time.monotonic() - started
    finally:
        runtime.capacity.fleet_errors.clear()
    # Then it fails at once (no wait for capacity), with the code and the Service Quotas quota to raise
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.type == "Capacity.QuotaExceeded"
    assert "MaxSpotInstanceCountExceeded" in job.error.message
    assert "All G and VT Spot Instance Requests" in job.error.message
    assert job.attempts == []
    assert job.capacity_wait is None
    # The capacity patience at this time scale is 72 s: failing fast means far less
    assert elapsed < 30


def test_an_instance_unknown_to_describe_just_after_launch_is_not_lost(runtime):
    # Given EC2 answering NotFound to DescribeInstances for the next launch, for a while
    runtime.consistency.inject(describe=1, window_seconds=150.0)  # 3 s real, past the first readiness polls
    # When the example job runs
    submitted = drop_manifest(runtime, (EXAMPLE_DIR / "manifest.yaml").read_bytes(), "notfound.yaml")
    job = wait_for_job(runtime, submitted.job_id, timeout=JOB_TIMEOUT)
    # Then the instance was not taken for lost (no relaunch, no avoided pool): one attempt, succeeded
    assert job.status is JobStatus.SUCCEEDED, job.error
    [attempt] = job.attempts
    assert attempt.end_reason == "completed"
    # and the fault was met: DescribeInstances answered NotFound for that instance (the readiness polls)
    assert runtime.consistency.not_found_served("DescribeInstances", attempt.instance_id) >= 1


def test_a_terminate_answered_not_found_is_retried_until_the_instance_is_gone(runtime):
    # Given EC2 answering NotFound to the first two TerminateInstances calls for the next launch (a NotFound
    # there does not mean the instance ended: it keeps running)
    runtime.consistency.inject(terminate=1, terminate_calls=2)
    manifest = example_manifest(
        **{
            'command: [python, train.py, --step-seconds, "0.02"]': 'command: [python, -c, "raise SystemExit(3)"]'
        }
    )
    # When a job that fails at once runs on it
    submitted = drop_manifest(runtime, manifest, "terminate-notfound.yaml")
    job = wait_for_job(runtime, submitted.job_id, timeout=JOB_TIMEOUT)
    # Then the job ends with its own failure, and its release, retried, terminated the instance
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.type == "Training.Failed", job.error
    [attempt] = job.attempts
    assert job.unreleased == []
    assert runtime.instance(attempt.instance_id).terminating
    assert attempt.instance_id not in runtime.running_instance_ids()
    # and the fault was met: exactly the two injected TerminateInstances calls answered NotFound
    assert runtime.consistency.not_found_served("TerminateInstances", attempt.instance_id) == 2
    # and the attempt is billed until EC2 took the third terminate, not from the first NotFound
    held = runtime.capacity.held(attempt.instance_id)
    assert held is not None
    assert held[1] is not None
    assert attempt.ended_at is not None
    assert abs((attempt.ended_at - held[1]).total_seconds()) < BILLING_TOLERANCE_SECONDS, (attempt, held)

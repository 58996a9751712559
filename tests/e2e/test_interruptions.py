"""Interruptions in the emulator: checkpoint on the warning, relaunch, resume, and prove nothing is lost."""

from __future__ import annotations

import pytest

from spotrun.local.chaos.plan import plan_interruptions
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import JobStatus
from tests.e2e.conftest import (
    assert_nothing_left_running,
    example_manifest,
    read_archived,
    run_with_chaos,
    sha256,
)

INTERVAL = 50
STEP_SECONDS = 0.02
# Interruptions are planned in the first 60 % of the run: a warning takes effect a few dozen steps after it is
# decided (progress is observed through S3, the agent polls IMDS; more under load), and one that lands after
# the last step changes nothing.
PLANNED_OVER = 180
MARGIN = 0.15


def model_bytes(runtime, job) -> bytes:
    [model] = [item for item in job.archive if item.uri.endswith("/model.npy")]
    return read_archived(runtime, model.uri)


def renamed(name: str) -> bytes:
    return example_manifest(**{"name: tiny-regression": f"name: {name}"})


# One interruption, and three in a row (each resumed from the one before): two adds nothing three does not.
@pytest.mark.parametrize("interruptions", [1, 3])
def test_a_job_interrupted_n_times_resumes_to_the_uninterrupted_model(runtime, direct_model, interruptions):
    # Given interruptions planned at random steps (seeded, so a failure can be replayed)
    steps = plan_interruptions(interruptions, PLANNED_OVER, seed=interruptions, margin=MARGIN)
    # When the example job runs and each planned step brings a spot interruption warning to its instance
    job = run_with_chaos(
        runtime, renamed(f"resume-{interruptions}"), f"resume-{interruptions}.yaml", steps, runtime.interrupt
    )

    # Then it succeeds with a model byte-identical to the uninterrupted run of the same script
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert model_bytes(runtime, job) == direct_model
    assert job.model_sha256 == sha256(direct_model)
    # And each interruption ended one attempt, lost at most one step, and the next attempt resumed from it
    assert len(job.attempts) == interruptions + 1
    for interrupted, resumed in zip(job.attempts, job.attempts[1:], strict=False):
        assert interrupted.end_reason == "interrupted"
        assert interrupted.notice_at is not None
        assert interrupted.steps_lost is not None
        assert interrupted.steps_lost <= 1
        assert resumed.restored_step is not None
        assert resumed.restored_step >= interrupted.last_step - 1
        assert resumed.checkpoint_restored.endswith(f"step-{resumed.restored_step:012d}/")
    assert job.attempts[-1].end_reason == "completed"
    assert_nothing_left_running(runtime, job)


def assert_lost_at_most_the_checkpoint_in_flight(first: Attempt, second: Attempt) -> None:
    """The next attempt resumed from a periodic checkpoint, the newest committed when the instance was lost: the
    newest taken, or the one before it while the newest was still being uploaded (how many steps that upload
    lasts depends on the machine's load, not on spotrun). The loss is less than two intervals, and counted."""
    assert second.restored_step is not None
    assert second.restored_step % INTERVAL == 0
    assert first.last_step is not None
    assert first.steps_lost == first.last_step - second.restored_step
    assert first.steps_lost < 2 * INTERVAL


def test_a_silent_death_is_caught_by_the_heartbeat_and_loses_at_most_a_checkpoint_interval(
    runtime, direct_model
):
    # Given a job whose instance will hang without notice mid-training (EC2 says running; nothing answers)
    steps = plan_interruptions(1, PLANNED_OVER, seed=11, margin=MARGIN)
    # When it hangs
    job = run_with_chaos(
        runtime,
        renamed("silent-death"),
        "silent-death.yaml",
        steps,
        lambda instance: runtime.kill(instance, hang=True),
    )

    # Then the heartbeat timeout relaunches it from the last periodic checkpoint, and the model is unchanged
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert model_bytes(runtime, job) == direct_model
    first, second = job.attempts
    assert first.end_reason == "heartbeat-timeout"
    assert first.notice_at is None
    assert_lost_at_most_the_checkpoint_in_flight(first, second)
    assert_nothing_left_running(runtime, job)


def test_a_terminated_instance_without_notice_fails_its_step_at_once(runtime, direct_model):
    # Given a job whose instance dies and is terminated without a notice
    steps = plan_interruptions(1, PLANNED_OVER, seed=12, margin=MARGIN)
    # When it dies
    job = run_with_chaos(runtime, renamed("killed"), "killed.yaml", steps, runtime.kill)

    # Then the state-change event failed the open step as a lost instance, and the job resumed
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert model_bytes(runtime, job) == direct_model
    first, second = job.attempts
    assert first.end_reason == "instance-lost"
    assert_lost_at_most_the_checkpoint_in_flight(first, second)
    assert_nothing_left_running(runtime, job)


def test_a_checkpoint_without_its_commit_marker_is_never_restored(runtime, direct_model):
    # Given a job that will be interrupted, and in S3 a newer checkpoint whose upload never wrote its marker
    manifest = renamed("half-written")
    half_written_step = 250
    seeded: list[str] = []

    def plant_then_interrupt(instance_id: str) -> None:
        job_id = next(iter(_jobs_named(runtime, "half-written")))
        key = f"jobs/{job_id}/checkpoints/step-{half_written_step:012d}/state.json"
        runtime.client("s3").put_object(
            Bucket=runtime.settings.jobs_bucket, Key=key, Body=b'{"step": 250, "tr'
        )
        seeded.append(key)
        runtime.interrupt(instance_id)

    # When the job is interrupted before step 250
    job = run_with_chaos(runtime, manifest, "half-written.yaml", [120], plant_then_interrupt)

    # Then the relaunch restored the last committed checkpoint, not the half-written one, and the model is right
    assert seeded
    assert job.status is JobStatus.SUCCEEDED, job.error
    first, second = job.attempts
    assert second.restored_step is not None
    assert second.restored_step < half_written_step
    assert second.restored_step == first.last_step - first.steps_lost
    assert model_bytes(runtime, job) == direct_model


def test_duplicated_and_out_of_order_events_cause_one_relaunch(runtime, direct_model):
    # Given a job whose instance gets its warning, then the same warning twice more, a late rebalance
    # recommendation and, after the relaunch, yet another copy of the warning
    def storm(instance_id: str) -> None:
        warning = {"instance-id": instance_id, "instance-action": "terminate"}
        arn = [f"arn:aws:ec2:us-east-1:123456789012:instance/{instance_id}"]
        runtime.interrupt(instance_id)
        for _ in range(2):
            runtime.publish_event("aws.ec2", "EC2 Spot Instance Interruption Warning", warning, arn)
        runtime.publish_event(
            "aws.ec2", "EC2 Instance Rebalance Recommendation", {"instance-id": instance_id}, arn
        )
        stale.append((warning, arn))

    stale: list = []
    job = run_with_chaos(runtime, renamed("event-storm"), "event-storm.yaml", [140], storm)
    for warning, arn in stale:
        runtime.publish_event("aws.ec2", "EC2 Spot Instance Interruption Warning", warning, arn)

    # Then there was one relaunch: two attempts, two instances launched for the job, one interruption
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert len(job.attempts) == 2
    assert [change.status for change in job.timeline].count(JobStatus.INTERRUPTED) == 1
    assert len(_instances_tagged(runtime, job.job_id)) == 2
    assert model_bytes(runtime, job) == direct_model
    assert_nothing_left_running(runtime, job)


def _jobs_named(runtime, name: str) -> list[str]:
    executions = runtime.client("stepfunctions").list_executions(
        stateMachineArn=runtime.settings.state_machine_arn
    )
    return [item["name"] for item in executions["executions"] if item["name"].startswith(f"{name}-")]


def _instances_tagged(runtime, job_id: str) -> set[str]:
    reservations = runtime.client("ec2").describe_instances(
        Filters=[{"Name": "tag:spotrun:job-id", "Values": [job_id]}]
    )["Reservations"]
    return {instance["InstanceId"] for reservation in reservations for instance in reservation["Instances"]}

"""training.gpu_idle end to end: a job whose GPUs stop working is released, failed or relaunched as it says.

The emulator's GPUs read busy while an instance's training runs; ``LocalRuntime.set_gpu`` makes one read idle
mid-training, as a script stuck off the GPU would (a dead data loader, a CPU-bound loop). The agent's watch sees
every GPU below the threshold for the manifest's minutes (time-scaled), stops the command with its checkpoint,
and the control plane acts on the policy's action.
"""

from __future__ import annotations

from datetime import datetime

from spotrun.model.job.record import JobStatus, utc_now
from tests.e2e.conftest import (
    E2E_TIME_SCALE,
    assert_nothing_left_running,
    example_manifest,
    instance_state,
    run_with_chaos,
)
from tests.sigv4 import local_client

# 2.5 minutes idle on AWS: 3 s at the e2e time scale.
IDLE_MINUTES = 2.5
WINDOW_SECONDS = IDLE_MINUTES * 60 * E2E_TIME_SCALE
IDLE_AT_STEP = 100  # two checkpoints committed (interval 50) before the GPUs go idle


def idle_manifest(name: str, action: str, steps: int) -> bytes:
    return example_manifest(
        **{
            "name: tiny-regression": f"name: {name}",
            '--step-seconds, "0.02"]': f'--step-seconds, "0.02", --steps, "{steps}"]\n'
            f"  gpu_idle: {{minutes: {IDLE_MINUTES}, action: {action}}}",
        }
    )


def test_action_fail_ends_the_job_with_training_idle_and_releases_its_instance(runtime):
    # Given a job that would train for over half an hour, under gpu_idle action fail
    manifest = idle_manifest("idle-fail", "fail", steps=100_000)
    idled: list[str] = []

    def go_idle(instance_id: str) -> None:
        idled.append(instance_id)
        runtime.set_gpu(instance_id, utilization=0.0)

    # When its instance's GPUs read 0 % from step 100 on
    job = run_with_chaos(runtime, manifest, "idle-fail.yaml", [IDLE_AT_STEP], go_idle, timeout=180)

    # Then the job failed with Training.Idle, its message saying the GPUs idled below 10 % for 2.5 minutes
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.type == "Training.Idle", job.error
    assert job.error.message.startswith(
        f"the GPUs stayed below 10 % utilization for {IDLE_MINUTES:g} minutes (highest reading 0 %)"
    ), job.error.message
    assert "action fail: the job fails and its instances are released" in job.error.message
    # and it was not relaunched: one attempt, on the instance that idled, ended well before its natural end
    [attempt] = job.attempts
    assert idled == [attempt.instance_id]
    assert attempt.end_reason == "failed"
    assert attempt.last_step is None or attempt.last_step < 100_000
    # and its instance is released
    assert_nothing_left_running(runtime, job)
    # and the record kept the node's GPU sample, the job's telemetry its readings, the last ones idle
    assert attempt.gpu is not None
    telemetry = local_client(runtime.api_url or "").telemetry(job.job_id)
    readings = [point for point in telemetry["gpu"] if point["attempt"] == 1]
    assert readings
    assert readings[-1]["utilization"] < 10


def test_action_relaunch_ends_the_attempt_idle_and_resumes_on_a_new_instance(runtime):
    # Given a 600-step job under gpu_idle action relaunch
    manifest = idle_manifest("idle-relaunch", "relaunch", steps=600)
    idled: list[str] = []
    idle_from: list[datetime] = []

    def go_idle(instance_id: str) -> None:
        idled.append(instance_id)
        idle_from.append(utc_now())
        runtime.set_gpu(instance_id, utilization=2.0)

    # When its first instance's GPUs read 2 % from step 100 on
    job = run_with_chaos(runtime, manifest, "idle-relaunch.yaml", [IDLE_AT_STEP], go_idle, timeout=240)

    # Then the job succeeded on a second attempt, the first ended "idle" and counted as a restart
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert len(job.attempts) == 2
    first, second = job.attempts
    assert idled == [first.instance_id]
    assert first.end_reason == "idle"
    assert job.interruptions == 1
    assert any(
        change.detail and f"stayed below 10 % utilization for {IDLE_MINUTES:g} minutes" in change.detail
        for change in job.timeline
    )
    # and the idle instance was terminated, the next attempt ran on a new one from the last committed checkpoint
    assert instance_state(runtime, first.instance_id) in {"shutting-down", "terminated"}
    assert second.instance_id != first.instance_id
    assert second.restored_step is not None
    assert second.restored_step >= IDLE_AT_STEP - 50
    assert second.end_reason == "completed"
    # and the attempt ended once its GPUs had idled for the window, not before, and not long after
    assert first.ended_at is not None
    idle_for = (first.ended_at - idle_from[0]).total_seconds()
    assert WINDOW_SECONDS <= idle_for < WINDOW_SECONDS + 60, idle_for
    assert_nothing_left_running(runtime, job)

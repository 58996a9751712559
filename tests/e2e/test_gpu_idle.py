"""training.gpu_idle end to end: a job whose GPUs stop working is released, failed or relaunched as it says.

The emulator's GPUs read busy while an instance's training runs; ``LocalRuntime.set_gpu`` makes one read idle
mid-training, as a script stuck off the GPU would (a dead data loader, a CPU-bound loop). The agent's watch sees
every GPU below the threshold for the manifest's minutes (time-scaled), stops the command with its checkpoint,
and the control plane acts on the policy's action. The two actions' jobs run side by side in one emulator (the
policy acts per job, per node): each test reads its own.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime

import pytest

from spotrun.local.chaos.injector import Injector
from spotrun.local.chaos.plan import InterruptionSchedule
from spotrun.local.demo import drop_manifest, job_progress, wait_for_job
from spotrun.local.runtime import LocalRuntime
from spotrun.model.job.record import Job, JobStatus, utc_now
from tests.e2e.conftest import (
    E2E_TIME_SCALE,
    assert_nothing_left_running,
    example_manifest,
    instance_state,
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


@dataclass
class IdledJob:
    """A job whose GPUs were made idle mid-training: the instances made idle, when, and the job as it ended."""

    utilization: float
    idled: list[str] = field(default_factory=list)
    idle_from: list[datetime] = field(default_factory=list)
    job: Job | None = None

    def go_idle(self, runtime: LocalRuntime, instance_id: str) -> None:
        self.idled.append(instance_id)
        self.idle_from.append(utc_now())
        runtime.set_gpu(instance_id, utilization=self.utilization)


@pytest.fixture(scope="module")
def idled(runtime) -> dict[str, IdledJob]:
    """Under action fail, a job that would train for over half an hour whose GPUs read 0 %; under action relaunch,
    a 600-step job whose first instance's GPUs read 2 %: each from step 100 on, both jobs running side by side."""
    runs = {"fail": (100_000, IdledJob(utilization=0.0)), "relaunch": (600, IdledJob(utilization=2.0))}
    with ExitStack() as injectors:
        submitted = {}
        for action, (steps, run) in runs.items():
            manifest = idle_manifest(f"idle-{action}", action, steps=steps)
            submitted[action] = drop_manifest(runtime, manifest, f"idle-{action}.yaml")
            injector = Injector(
                InterruptionSchedule([IDLE_AT_STEP]),
                job_progress(runtime, submitted[action].job_id),
                lambda instance_id, run=run: run.go_idle(runtime, instance_id),
            )
            injectors.enter_context(injector)
        for action, (_, run) in runs.items():
            run.job = wait_for_job(runtime, submitted[action].job_id, timeout=240)
            assert run.idled, f"idle-{action} never reached step {IDLE_AT_STEP}"
    return {action: run for action, (_, run) in runs.items()}


def test_action_fail_ends_the_job_with_training_idle_and_releases_its_instance(runtime, idled):
    # Given a job that would train for over half an hour, under gpu_idle action fail
    # When its instance's GPUs read 0 % from step 100 on
    run = idled["fail"]
    job = run.job
    assert job is not None

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
    assert run.idled == [attempt.instance_id]
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


def test_action_relaunch_ends_the_attempt_idle_and_resumes_on_a_new_instance(runtime, idled):
    # Given a 600-step job under gpu_idle action relaunch
    # When its first instance's GPUs read 2 % from step 100 on
    run = idled["relaunch"]
    job = run.job
    assert job is not None

    # Then the job succeeded on a second attempt, the first ended "idle" and counted as a restart
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert len(job.attempts) == 2
    first, second = job.attempts
    assert run.idled == [first.instance_id]
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
    idle_for = (first.ended_at - run.idle_from[0]).total_seconds()
    assert WINDOW_SECONDS <= idle_for < WINDOW_SECONDS + 60, idle_for
    assert_nothing_left_running(runtime, job)

"""How the demo's injector sees a job's progress: the job record, the progress object, committed checkpoints."""

from __future__ import annotations

import json
from typing import Any

import boto3

from spotrun.aws.adapters import job_store
from spotrun.aws.settings import Settings
from spotrun.local.chaos.injector import Progress
from spotrun.local.demo import job_progress
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import JobStatus, transition, utc_now
from spotrun.model.layout import commit_marker_key, progress_key


class Runtime:
    """What job_progress uses of a LocalRuntime: the settings and a client per service (moto, in process)."""

    def __init__(self, settings: Settings):
        self.settings = settings

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=self.settings.region)


def move_to(deployment: Settings, job_id: str, status: JobStatus, **attempt: Any) -> None:
    """Walk the stored job to ``status`` with one attempt (fields of the attempt overridable)."""
    store = job_store(deployment.jobs_table, deployment.region)
    job = store.get(job_id)
    assert job is not None
    now = utc_now()
    path = [
        JobStatus.ACQUIRING,
        JobStatus.BOOTING,
        JobStatus.STAGING,
        JobStatus.TRAINING,
        JobStatus.ARCHIVING,
    ]
    for step in path[: path.index(status) + 1]:
        job = transition(job, step, now)
    fields: dict[str, Any] = {
        "number": 1,
        "instance_id": "i-0000000000000001",
        "instance_type": "g5.xlarge",
        "availability_zone": "us-east-1a",
        "lifecycle": "spot",
        "price_per_hour": 0.3,
        "started_at": now,
    }
    job = job.model_copy(update={"attempts": [Attempt.model_validate(fields | attempt)]})
    store.save(job)


def put(deployment: Settings, key: str, body: dict[str, Any]) -> None:
    boto3.client("s3", region_name=deployment.region).put_object(
        Bucket=deployment.jobs_bucket, Key=key, Body=json.dumps(body).encode()
    )


def test_no_progress_while_the_job_is_not_training(deployment: Settings, job_id: str) -> None:
    # Given a job still staging on its first attempt
    move_to(deployment, job_id, JobStatus.STAGING)

    # When its progress is read
    # Then there is none to act on
    assert job_progress(Runtime(deployment), job_id)() is None


def test_the_progress_object_of_the_current_attempt_gives_the_step(deployment: Settings, job_id: str) -> None:
    # Given a training job whose agent reported step 42 for attempt 1 (and 7 for an unrelated attempt 2)
    move_to(deployment, job_id, JobStatus.TRAINING)
    put(deployment, progress_key(job_id, 1), {"step": 42, "updated_at": "2025-01-01T00:00:00Z"})
    put(deployment, progress_key(job_id, 2), {"step": 7, "updated_at": "2025-01-01T00:00:00Z"})
    read = job_progress(Runtime(deployment), job_id)

    # When its progress is read, before and after a newer checkpoint is committed
    before = read()
    put(deployment, commit_marker_key(job_id, 50), {})
    after = read()

    # Then the step is the reported one, then the committed checkpoint's once that is ahead
    assert before == Progress(attempt=1, instance_id="i-0000000000000001", step=42)
    assert after == Progress(attempt=1, instance_id="i-0000000000000001", step=50)


def test_a_restored_checkpoint_is_not_progress_of_the_attempt(deployment: Settings, job_id: str) -> None:
    # Given an attempt that restored the checkpoint of step 150 and has reported nothing yet
    put(deployment, commit_marker_key(job_id, 150), {})
    move_to(deployment, job_id, JobStatus.TRAINING, restored_step=150, checkpoint_restored="x/")

    # When its progress is read
    progress = job_progress(Runtime(deployment), job_id)()

    # Then its step is unknown (150 was the previous attempt's work)
    assert progress == Progress(attempt=1, instance_id="i-0000000000000001", step=None)

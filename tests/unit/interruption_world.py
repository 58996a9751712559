"""A job training on its first attempt over fakes, and the warnings and relaunches the interruption tests give it."""

from datetime import UTC, datetime, timedelta

from spotrun.aws.settings import Settings
from spotrun.control.capacity.acquire import acquire_instance
from spotrun.control.capacity.ec2_events import on_interruption_warning
from spotrun.control.capacity.interruptions import record_interruption
from spotrun.control.store import update_job
from spotrun.model.job.record import JobStatus, ManifestSource, new_job, transition
from spotrun.model.manifest.parse import parse_manifest_text
from spotrun.model.timing import workflow_timing
from tests.unit.fakes import FakeCommands, FakeCompute, FakeObjects, InMemoryJobStore

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
BUCKET = "jobs-bucket"
MANIFEST = parse_manifest_text(
    "name: tiny\nresources: {gpu_names: [t4]}\ncapacity: {max_interruptions: 2}\ntraining: {command: [python, t.py]}\n"
)
SETTINGS = Settings(
    region="us-east-1",
    jobs_table="jobs",
    jobs_bucket=BUCKET,
    agent_document_name="spotrun-agent-run",
    launch_template_name="spotrun-agent",
    subnet_ids=("subnet-a", "subnet-b"),
)


def job_in_training():
    """A job training on its first attempt, its instance running: ``(store, compute, attempt)``."""
    store, compute = InMemoryJobStore(), FakeCompute()
    job = new_job(
        "tiny-0123456789ab",
        "tiny",
        ManifestSource(bucket="b", key="k", etag="e"),
        MANIFEST.model_dump(mode="json"),
        T0,
    )
    store.create(job)
    attempt = acquire(store, compute, T0)
    compute.states[attempt.instance_id] = "running"
    for status in (JobStatus.STAGING, JobStatus.TRAINING):
        update_job(store, "tiny-0123456789ab", lambda current, status=status: transition(current, status, T0))
    update_job(
        store, "tiny-0123456789ab", lambda current: current.model_copy(update={"task_token": "token-1"})
    )
    return store, compute, attempt


def acquire(store, compute, now):
    """The workflow's acquire step for the job: its next attempt (the standby, or a new instance)."""
    return acquire_instance(
        job_id="tiny-0123456789ab",
        store=store,
        compute=compute,
        subnet_ids=SETTINGS.subnet_ids,
        launch_template_name="spotrun-agent",
        timing=workflow_timing(MANIFEST, 1.0),
        now=now,
    )


def warn(store, compute, instance_id, commands=None, objects=None):
    return on_interruption_warning(
        instance_id=instance_id,
        store=store,
        compute=compute,
        objects=objects or FakeObjects(),
        commands=commands or FakeCommands(),
        settings=SETTINGS,
        now=T0 + timedelta(minutes=5),
    )


def interrupt_and_relaunch(store, compute, times):
    for number in range(times):
        minute = T0 + timedelta(minutes=10 + number)
        record_interruption(
            job_id="tiny-0123456789ab",
            error={"Error": "Spot.Interrupted", "Cause": "{}"},
            store=store,
            compute=compute,
            objects=FakeObjects(),
            jobs_bucket=BUCKET,
            now=minute,
        )
        attempt = acquire(store, compute, minute)
        compute.states[attempt.instance_id] = "running"
    return store.get("tiny-0123456789ab").current_attempt

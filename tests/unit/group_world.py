"""A two-node job over fakes: launched, ready, training; and the steps the group tests drive it through."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from spotrun.aws.settings import Settings
from spotrun.control.capacity.acquire import acquire_instance
from spotrun.control.capacity.ec2_events import on_interruption_warning
from spotrun.control.capacity.fleet import GroupSite
from spotrun.control.capacity.interruptions import InterruptionRecord, record_interruption
from spotrun.control.capacity.readiness import check_ready
from spotrun.control.dispatch import dispatch_agent_step
from spotrun.model.agent_protocol.command import AgentCommand
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import JobStatus, ManifestSource, new_job
from spotrun.model.manifest.parse import parse_manifest_text
from spotrun.model.manifest.schema import JobManifest
from spotrun.model.timing import workflow_timing
from tests.unit.fakes import FakeCommands, FakeCompute, FakeObjects, InMemoryJobStore

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
JOB_ID = "ddp-0123456789ab"
BUCKET = "jobs-bucket"
MANIFEST = parse_manifest_text(
    "name: ddp\nresources: {gpu_names: [a10g], nodes: 2}\ncapacity: {max_interruptions: 3}\n"
    'training: {command: [torchrun, --nproc-per-node, "1", train.py]}\n'
)
SETTINGS = Settings(
    region="us-east-1",
    jobs_table="jobs",
    jobs_bucket=BUCKET,
    agent_document_name="spotrun-agent-run",
    agent_report_url="https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com/v1/agent/reports",
    launch_template_name="spotrun-agent",
    efa_launch_template_name="spotrun-agent-efa",
    subnet_ids=("subnet-a", "subnet-b"),
    placement_group_names=("spotrun-a", "spotrun-b"),
)
TIMING = workflow_timing(MANIFEST, 1.0)


class GroupWorld:
    """The fakes a two-node job runs over, and the workflow's steps as the tests call them."""

    def __init__(self, manifest: JobManifest = MANIFEST) -> None:
        self.store, self.compute = InMemoryJobStore(), FakeCompute()
        self.commands, self.objects = FakeCommands(), FakeObjects()
        job = new_job(JOB_ID, "ddp", ManifestSource(bucket="b", key="k", etag="e"), manifest, T0)
        self.store.create(job)

    def acquire(self, now: datetime = T0) -> Attempt:
        attempt = acquire_instance(
            job_id=JOB_ID,
            store=self.store,
            compute=self.compute,
            subnet_ids=SETTINGS.subnet_ids,
            launch_template_name=SETTINGS.launch_template_name,
            timing=TIMING,
            now=now,
            group=GroupSite.of(SETTINGS),
        )
        for instance_id in attempt.instance_ids():
            self.compute.states.setdefault(instance_id, "running")
            if self.compute.states[instance_id] == "pending":
                self.compute.states[instance_id] = "running"
        return attempt

    def ready(self, now: datetime = T0) -> bool:
        return check_ready(
            job_id=JOB_ID,
            store=self.store,
            compute=self.compute,
            commands=self.commands,
            timing=TIMING,
            now=now,
        ).ready

    def dispatch(self, step: Any = "train", now: datetime = T0) -> list[AgentCommand]:
        sent = len(self.commands.sent)
        dispatch_agent_step(
            job_id=JOB_ID,
            step=step,
            task_token=f"token-{step}",
            timing=TIMING,
            staged=None,
            store=self.store,
            objects=self.objects,
            commands=self.commands,
            settings=SETTINGS,
            now=now,
        )
        return [self.command(uri) for _, _, uri in self.commands.sent[sent:]]

    def command(self, uri: str) -> AgentCommand:
        key = uri.split("/", 3)[3]
        return AgentCommand.model_validate_json(self.objects.objects[(BUCKET, key)])

    def training(self) -> Attempt:
        """The job launched, ready and training on its first attempt."""
        self.acquire()
        assert self.ready()
        self.dispatch("stage")
        self.dispatch("train")
        job = self.store.get(JOB_ID)
        assert job is not None
        assert job.status is JobStatus.TRAINING
        assert job.current_attempt is not None
        return job.current_attempt

    def warn(self, instance_id: str, now: datetime) -> None:
        on_interruption_warning(
            instance_id=instance_id,
            store=self.store,
            compute=self.compute,
            objects=self.objects,
            commands=self.commands,
            settings=SETTINGS,
            now=now,
        )

    def record(self, error: str, now: datetime, keep_healthy_nodes: bool = True) -> InterruptionRecord:
        return record_interruption(
            job_id=JOB_ID,
            error={"Error": error, "Cause": "{}"},
            store=self.store,
            compute=self.compute,
            objects=self.objects,
            jobs_bucket=BUCKET,
            now=now,
            keep_healthy_nodes=keep_healthy_nodes,
        )

    def job(self):
        job = self.store.get(JOB_ID)
        assert job is not None
        return job


def later(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)

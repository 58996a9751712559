"""GPU health in the job record: each node's latest sample and first memory-high reading, at a bounded write cost."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spotrun.control.agent_reports import AgentReport, CallerIdentity, answer_agent_report
from spotrun.model.job.attempt import Attempt, NodeRun
from spotrun.model.job.gpu_health import GPU_SAMPLE_REFRESH_SECONDS, memory_high, sample_due
from spotrun.model.job.record import Job, JobStatus, ManifestSource
from spotrun.model.job.telemetry import GpuLine
from tests.unit.fakes import FakeWorkflows, InMemoryJobStore

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
ACCOUNT = "123456789012"
ROLE = "spotrun-instances"
JOB_ID = "job-a-00000000000a"


class CountingStore(InMemoryJobStore):
    """The in-memory store, counting the record writes (each one a DynamoDB PutItem of the whole job)."""

    def __init__(self) -> None:
        super().__init__()
        self.saves = 0

    def save(self, job: Job) -> Job:
        self.saves += 1
        return super().save(job)


def sample(at: datetime, *memory_used: float, utilization: float = 95.0) -> GpuLine:
    """One sample of GPUs of 24,000 MiB each, using ``memory_used`` MiB."""
    gpus = [
        {"index": index, "utilization": utilization, "memory_used_mib": used, "memory_total_mib": 24000.0}
        for index, used in enumerate(memory_used)
    ]
    return GpuLine.model_validate({"at": at.isoformat(), "gpus": gpus})


def training_job(nodes: int = 1) -> Job:
    runs = (
        [NodeRun(node=k, instance_id=f"i-node{k}", started_at=NOW) for k in range(nodes)] if nodes > 1 else []
    )
    attempt = Attempt(
        number=1,
        instance_id="i-node0",
        instance_type="g5.12xlarge",
        availability_zone="us-east-1a",
        lifecycle="spot",
        price_per_hour=2.0,
        started_at=NOW,
        nodes=runs,
    )
    return Job(
        job_id=JOB_ID,
        name="a",
        status=JobStatus.TRAINING,
        source=ManifestSource(),
        created_at=NOW,
        updated_at=NOW,
        attempts=[attempt],
        task_token="token",
    )


def beat(
    store: CountingStore, instance_id: str, line: GpuLine, refresh: float = GPU_SAMPLE_REFRESH_SECONDS
) -> None:
    report = AgentReport.model_validate(
        {
            "job_id": JOB_ID,
            "attempt": 1,
            "step": "train",
            "kind": "heartbeat",
            "gpu": line.model_dump(mode="json"),
        }
    ).root
    answer_agent_report(
        report,
        identity=CallerIdentity(
            user_arn=f"arn:aws:sts::{ACCOUNT}:assumed-role/{ROLE}/{instance_id}", account_id=ACCOUNT
        ),
        instance_role_name=ROLE,
        store=store,
        workflows=FakeWorkflows(),
        gpu_refresh_seconds=refresh,
    )


def stored(store: InMemoryJobStore) -> Attempt:
    job = store.get(JOB_ID)
    assert job is not None
    assert job.current_attempt is not None
    return job.current_attempt


def test_memory_high_names_the_fullest_gpu_above_90_percent() -> None:
    # Given samples whose fullest GPU uses 90 % exactly, and 95 %
    at_limit = sample(NOW, 1000.0, 21600.0)
    above = sample(NOW, 22800.0, 21600.0)
    # When they are checked
    # Then 90 % is not flagged, 95 % is, naming GPU 0 and its percent
    assert memory_high(at_limit, node=0) is None
    flagged = memory_high(above, node=2)
    assert flagged is not None
    assert (flagged.node, flagged.gpu, flagged.percent, flagged.at) == (2, 0, 95.0, NOW)


def test_a_sample_is_due_when_none_is_stored_or_the_stored_one_is_old() -> None:
    # Given a stored sample
    old = sample(NOW, 1000.0)
    # When newer samples come, and an older one late
    # Then only one refresh_seconds newer (or the first) replaces it
    assert sample_due(None, old, 300.0)
    assert not sample_due(old, sample(NOW + timedelta(seconds=299), 1000.0), 300.0)
    assert sample_due(old, sample(NOW + timedelta(seconds=300), 1000.0), 300.0)
    assert not sample_due(old, sample(NOW - timedelta(seconds=600), 1000.0), 300.0)


def test_heartbeats_write_the_record_once_per_refresh_interval_not_once_per_beat() -> None:
    # Given a one-node job training, its agent beating every 60 s (AWS's agent_heartbeat_seconds) for 30 minutes
    store = CountingStore()
    store.create(training_job())
    # When each heartbeat carries a sample (memory at 50 %)
    for minute in range(30):
        beat(store, "i-node0", sample(NOW + timedelta(minutes=minute), 12000.0))
    # Then the record was written at the first beat and then every 5 minutes: 6 writes for 30 beats (0.2 a beat),
    # and it holds the last sample written
    assert store.saves == 6
    assert stored(store).gpu is not None
    assert stored(store).gpu.at == NOW + timedelta(minutes=25)
    assert stored(store).gpu_memory_high is None


def test_the_first_memory_high_reading_is_written_at_once_and_kept() -> None:
    # Given a job whose sample was just stored
    store = CountingStore()
    store.create(training_job())
    beat(store, "i-node0", sample(NOW, 12000.0))
    # When the next beat reads 96 % on GPU 1, and later ones read high again
    beat(store, "i-node0", sample(NOW + timedelta(seconds=60), 12000.0, 23040.0))
    beat(store, "i-node0", sample(NOW + timedelta(seconds=120), 12000.0, 23500.0))
    # Then the first crossing is written at once (2 writes in all), and a later crossing does not move it
    assert store.saves == 2
    flag = stored(store).gpu_memory_high
    assert flag is not None
    assert (flag.at, flag.node, flag.gpu, flag.percent) == (NOW + timedelta(seconds=60), 0, 1, 96.0)


def test_a_groups_nodes_keep_their_own_samples() -> None:
    # Given a two-node attempt
    store = CountingStore()
    store.create(training_job(nodes=2))
    # When node 1 reads its memory high and node 0 does not
    beat(store, "i-node0", sample(NOW, 1000.0))
    beat(store, "i-node1", sample(NOW, 23000.0))
    # Then each node of the attempt holds its own sample, and only node 1 its flag; the attempt's fields stay empty
    attempt = stored(store)
    node0, node1 = attempt.node_runs()
    assert node0.gpu is not None
    assert node0.gpu.gpus[0].memory_used_mib == 1000.0
    assert node1.gpu is not None
    assert node1.gpu.gpus[0].memory_used_mib == 23000.0
    assert node0.gpu_memory_high is None
    assert node1.gpu_memory_high is not None
    assert node1.gpu_memory_high.node == 1
    assert attempt.gpu is None
    assert attempt.gpu_memory_high is None


def test_a_heartbeat_without_a_sample_writes_nothing() -> None:
    # Given a job training
    store = CountingStore()
    store.create(training_job())
    # When a heartbeat without a GPU sample is answered (no nvidia-smi on the instance)
    report = AgentReport.model_validate(
        {"job_id": JOB_ID, "attempt": 1, "step": "train", "kind": "heartbeat"}
    ).root
    answer_agent_report(
        report,
        identity=CallerIdentity(
            user_arn=f"arn:aws:sts::{ACCOUNT}:assumed-role/{ROLE}/i-node0", account_id=ACCOUNT
        ),
        instance_role_name=ROLE,
        store=store,
        workflows=FakeWorkflows(),
    )
    # Then the record was not written
    assert store.saves == 0
    assert stored(store).gpu is None

"""A deadline job training on spot is decided again at each heartbeat, and moved to on-demand when it must."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from spotrun.aws.settings import Settings
from spotrun.control.capacity.acquire import acquire_instance
from spotrun.control.capacity.deadline_moves import redecide_while_training
from spotrun.control.capacity.interruptions import record_interruption
from spotrun.control.store import update_job
from spotrun.model.agent_protocol.command import FailureCause
from spotrun.model.deadline.state import Choice
from spotrun.model.job.record import JobStatus, ManifestSource, new_job, transition
from spotrun.model.manifest.parse import parse_manifest_document
from spotrun.model.timing import workflow_timing
from tests.unit.fakes import FakeCommands, FakeCompute, FakeObjects, InMemoryJobStore

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
JOB = "tiny-0123456789ab"
SETTINGS = Settings(
    region="us-east-1",
    jobs_table="jobs",
    jobs_bucket="jobs-bucket",
    agent_document_name="spotrun-agent-run",
    launch_template_name="spotrun-agent",
    subnet_ids=("subnet-a", "subnet-b"),
)


def training_on_spot(training_from: datetime = T0, deadline: str = "3h", hours: float = 2.0):
    """A deadline job on a spot attempt since T0, staging until ``training_from``: ``(store, compute)``."""
    manifest = parse_manifest_document(
        {
            "name": "tiny",
            "resources": {"gpu_names": ["a10g"]},
            "capacity": {"deadline": deadline},
            "training": {"command": ["python", "t.py"], "expected_hours": hours},
        }
    )
    store, compute = InMemoryJobStore(), FakeCompute()
    store.create(new_job(JOB, "tiny", ManifestSource(bucket="b", key="k"), manifest, T0))
    acquire_instance(
        job_id=JOB,
        store=store,
        compute=compute,
        subnet_ids=SETTINGS.subnet_ids,
        launch_template_name="spotrun-agent",
        timing=workflow_timing(manifest, 1.0),
        now=T0,
    )
    update_job(store, JOB, lambda current: transition(current, JobStatus.STAGING, T0))
    update_job(store, JOB, lambda current: transition(current, JobStatus.TRAINING, training_from))
    return store, compute


def heartbeat(store, commands, now):
    return redecide_while_training(
        JOB, store=store, objects=FakeObjects(), commands=commands, events=None, settings=SETTINGS, now=now
    )


def notice_answered(store, compute, now):
    """The agent's answer to a move's notice (``Spot.Interrupted`` at step 5), recorded as the workflow does."""
    return record_interruption(
        job_id=JOB,
        error={
            "Error": "Spot.Interrupted",
            "Cause": FailureCause(message="notice", last_step=5).model_dump_json(),
        },
        store=store,
        compute=compute,
        objects=FakeObjects(),
        jobs_bucket="jobs-bucket",
        now=now,
    )


def test_with_slack_left_the_job_stays_on_spot_and_the_agent_hears_nothing() -> None:
    # Given 2 h of work due in 3 h, training on spot since T0 (slack 0.83 h), When a heartbeat comes at 5 minutes
    store, _ = training_on_spot()
    commands = FakeCommands()
    decision = heartbeat(store, commands, T0 + timedelta(minutes=5))
    # Then spot it stays: no notice, no new decision on the record (spot was the last one)
    assert decision.choice is Choice.SPOT
    # and training without pause kept the slack it had at submission (work advances at the policy's run rate)
    assert decision.slack_hours == pytest.approx(3 - 0.1 - 2 / (0.5 / (0.5 + 1 / 60)))
    assert commands.sent == []
    assert [d.choice for d in store.get(JOB).deadline_decisions] == ["spot"]


def test_the_margin_holds_what_the_attempt_could_lose_not_a_whole_interval() -> None:
    # Given the job whose staging took 20 minutes (slack 0.50 h), on spot for 21 minutes: a preemption before the
    # next heartbeat could take at most 22 minutes of it, seen a minute late (a 0.38 h margin), where a whole
    # interval would be 0.53 h
    store, _ = training_on_spot(T0 + timedelta(minutes=20))
    commands = FakeCommands()
    # When a heartbeat comes at 21 minutes
    decision = heartbeat(store, commands, T0 + timedelta(minutes=21))
    # Then it stays on spot: no notice
    assert decision.choice is Choice.SPOT
    assert decision.slack_hours == pytest.approx(0.5, abs=0.01)
    assert commands.sent == []


def test_when_the_slack_falls_to_the_margin_the_agent_gets_the_notice_once() -> None:
    # Given the same job, whose staging took 20 minutes (more than the 6 the policy assumed for a start)
    store, _ = training_on_spot(T0 + timedelta(minutes=20))
    commands = FakeCommands()
    # When heartbeats come at 29 minutes (slack 0.50 h, below the 0.52 h margin: the 29 minutes on spot a
    # preemption could take, a minute more by the next decision, and that minute's delay) and 30
    first = heartbeat(store, commands, T0 + timedelta(minutes=29))
    second = heartbeat(store, commands, T0 + timedelta(minutes=30))
    # Then the first moves it: the agent gets the notice command, the attempt is marked, the decision recorded;
    # the second finds the notice given and does nothing
    assert first.choice is Choice.ON_DEMAND
    assert second is None
    ((document, _, uri),) = commands.sent
    assert document == "spotrun-agent-run"
    assert uri.endswith("-notice.json")
    job = store.get(JOB)
    assert job.current_attempt.deadline_move
    assert job.current_attempt.notice_at is not None
    assert [d.choice for d in job.deadline_decisions] == ["spot", "on-demand"]


def test_the_move_is_no_interruption_and_the_next_attempt_is_on_demand() -> None:
    # Given a job moved off spot by its deadline
    store, compute = training_on_spot(T0 + timedelta(minutes=20))
    heartbeat(store, FakeCommands(), T0 + timedelta(minutes=29))
    # When the agent's Spot.Interrupted comes back and the workflow acquires again
    record = notice_answered(store, compute, T0 + timedelta(minutes=37))
    attempt = acquire_instance(
        job_id=JOB,
        store=store,
        compute=compute,
        subnet_ids=SETTINGS.subnet_ids,
        launch_template_name="spotrun-agent",
        timing=workflow_timing(store.get(JOB).require_manifest(), 1.0),
        now=T0 + timedelta(minutes=38),
    )
    # Then the attempt ended as a move (not counted, its pool not avoided), and the next one is on-demand
    assert record.reason == "deadline-move"
    job = store.get(JOB)
    assert job.interruptions == 0
    assert attempt.lifecycle == "on-demand"


def test_without_a_deadline_heartbeats_decide_nothing() -> None:
    # Given a job without a deadline training on spot
    store, compute = InMemoryJobStore(), FakeCompute()
    manifest = parse_manifest_document({"name": "tiny", "training": {"command": ["python", "t.py"]}})
    store.create(new_job(JOB, "tiny", ManifestSource(bucket="b", key="k"), manifest, T0))
    acquire_instance(
        job_id=JOB,
        store=store,
        compute=compute,
        subnet_ids=SETTINGS.subnet_ids,
        launch_template_name="spotrun-agent",
        timing=workflow_timing(manifest, 1.0),
        now=T0,
    )
    update_job(store, JOB, lambda current: transition(current, JobStatus.STAGING, T0))
    update_job(store, JOB, lambda current: transition(current, JobStatus.TRAINING, T0))
    commands = FakeCommands()
    # When it reports, Then nothing is decided or sent
    assert heartbeat(store, commands, T0 + timedelta(hours=30)) is None
    assert commands.sent == []

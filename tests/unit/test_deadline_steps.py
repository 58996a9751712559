"""A deadline job whose work is in steps (training.total_steps): decided without an estimate until its progress
gives one, then on the work learnt from the steps reported at heartbeats; the plan, the submission's record and
the decisions say which."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from spotrun.aws.settings import Settings
from spotrun.control.capacity.acquire import acquire_instance
from spotrun.control.capacity.deadline_moves import redecide_while_training
from spotrun.control.store import update_job
from spotrun.control.submission import start_job
from spotrun.model.deadline.state import Choice
from spotrun.model.deadline.stored_job import ASSUMED, work_estimate
from spotrun.model.deadline.work import decide_without_estimate
from spotrun.model.job.record import JobStatus, ManifestSource, new_job, transition
from spotrun.model.layout import progress_key
from spotrun.model.manifest.parse import parse_manifest_document
from spotrun.model.timing import workflow_timing
from tests.unit.fakes import FakeCommands, FakeCompute, FakeObjects, FakeWorkflows, InMemoryJobStore
from tests.unit.test_plan import document, plan_of

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
MANIFEST: dict[str, Any] = {
    "name": "tiny",
    "resources": {"gpu_names": ["a10g"]},
    "capacity": {"deadline": "3h"},
    "training": {"command": ["python", "t.py"], "total_steps": 1000},
}


def training_on_spot() -> InMemoryJobStore:
    """The job acquired at T0 (on spot: no estimate, the deadline far) and training from T0."""
    manifest = parse_manifest_document(MANIFEST)
    store = InMemoryJobStore()
    store.create(new_job(JOB, "tiny", ManifestSource(bucket="b", key="k"), manifest, T0))
    attempt = acquire_instance(
        job_id=JOB,
        store=store,
        compute=FakeCompute(),
        subnet_ids=SETTINGS.subnet_ids,
        launch_template_name="spotrun-agent",
        timing=workflow_timing(manifest, 1.0),
        now=T0,
    )
    assert attempt.lifecycle == "spot"
    update_job(store, JOB, lambda current: transition(current, JobStatus.STAGING, T0))
    update_job(store, JOB, lambda current: transition(current, JobStatus.TRAINING, T0))
    return store


def heartbeat(store: InMemoryJobStore, objects: FakeObjects, commands: FakeCommands, minutes: float):
    return redecide_while_training(
        JOB,
        store=store,
        objects=objects,
        commands=commands,
        events=None,
        settings=SETTINGS,
        now=T0 + timedelta(minutes=minutes),
    )


def reported(objects: FakeObjects, step: int, minutes: float) -> None:
    at = (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")
    objects.put_json("jobs-bucket", progress_key(JOB, 1), {"step": step, "updated_at": at})


def test_without_an_estimate_spot_while_far_on_demand_when_near_or_spot_is_gone() -> None:
    # Given a 3 h deadline, When decided with no estimate at three moments, Then the conservative rule holds
    far = decide_without_estimate(2.0, 3.0, spot_available=True, estimate_after_hours=1 / 6)
    gone = decide_without_estimate(2.0, 3.0, spot_available=False, estimate_after_hours=1 / 6)
    near = decide_without_estimate(1.5, 3.0, spot_available=True, estimate_after_hours=1 / 6)
    assert (far.choice, gone.choice, near.choice) == (Choice.SPOT, Choice.ON_DEMAND, Choice.ON_DEMAND)
    assert "not checked until the job reports progress" in far.reason


def test_the_first_decision_has_no_estimate_and_says_so() -> None:
    # Given the job acquired at T0, When its record is read
    decision = training_on_spot().get(JOB).deadline_decisions[-1]
    # Then its spot decision has neither slack nor work, and says why
    assert (decision.choice, decision.slack_hours, decision.work_hours, decision.work_source) == (
        "spot",
        None,
        None,
        None,
    )
    assert "no work estimate" in decision.reason


def test_a_slow_job_learnt_from_its_steps_moves_to_on_demand() -> None:
    # Given the job training on spot, whose script reported step 20 at 5 minutes, then step 100 at 20 minutes
    store, objects, commands = training_on_spot(), FakeObjects(), FakeCommands()
    reported(objects, 20, 5)
    early = heartbeat(store, objects, commands, 5.5)
    reported(objects, 100, 20)
    # When the heartbeat after the second report comes
    late = heartbeat(store, objects, commands, 20.5)
    # Then the first had too little training for an estimate (5 of 10 minutes) and kept spot, with the step kept
    assert early.choice is Choice.SPOT
    # and the second learnt 1000 steps at 0.2 min each (3.2 h of work, more than the 2.7 h left): on-demand, with
    # the steps' training time counted up to the report, not the heartbeat
    job = store.get(JOB)
    assert job.steps_reported.steps == 100
    assert abs(job.steps_reported.training_hours - 20 / 60) < 1e-9
    assert late.choice is Choice.ON_DEMAND
    assert len(commands.sent) == 1
    decision = job.deadline_decisions[-1]
    assert decision.choice == "on-demand"
    assert decision.work_source == "progress: 100 steps in 0.33 h"
    assert decision.work_hours is not None
    assert 3.2 < decision.work_hours < 3.3
    assert decision.slack_hours is not None
    assert decision.slack_hours < 0


def test_a_fast_job_learnt_from_its_steps_stays_on_spot() -> None:
    # Given the job whose script reported step 500 at 20 minutes (0.64 h of work in all)
    store, objects, commands = training_on_spot(), FakeObjects(), FakeCommands()
    reported(objects, 500, 20)
    # When the heartbeat comes, Then it stays on spot with slack to spare, and the agent hears nothing
    decision = heartbeat(store, objects, commands, 20.5)
    assert decision.choice is Choice.SPOT
    assert decision.slack_hours > 1.5
    assert commands.sent == []


def test_a_script_that_reports_no_steps_goes_on_demand_once_the_deadline_is_near() -> None:
    # Given the job training on spot with no progress document, When a heartbeat comes past half its 3 h
    store, commands = training_on_spot(), FakeCommands()
    decision = heartbeat(store, FakeObjects(), commands, 91)
    # Then it moves to on-demand without an estimate, the record saying why
    assert decision.choice is Choice.ON_DEMAND
    assert len(commands.sent) == 1
    assert "the deadline is near" in store.get(JOB).deadline_decisions[-1].reason


def test_the_plan_says_the_deadline_cannot_be_checked_yet() -> None:
    # Given a deadline with the work in steps, When planned
    plan = plan_of(document(capacity={"deadline": "36h"}, training={"total_steps": 5000}))
    # Then it runs, and its deadline note says the check waits for progress, before the first decision
    assert plan.ok, plan.problems
    assert plan.deadline is not None
    assert plan.deadline.startswith("capacity.deadline cannot be checked until the job reports progress")
    assert "first decision: spot, slack unknown" in plan.deadline


def test_the_submitted_record_says_the_deadline_cannot_be_checked_yet() -> None:
    # Given the manifest in steps, When submitted
    store = InMemoryJobStore()
    outcome = start_job(
        parse_manifest_document(MANIFEST),
        ManifestSource(bucket="jobs", key="manifests/tiny.yaml", etag="e1"),
        store=store,
        workflows=FakeWorkflows(),
        state_machine_arn="arn:aws:states:us-east-1:123456789012:stateMachine:spotrun-job",
        time_scale=1.0,
        now=T0,
    )
    # Then its submission's timeline entry says the deadline is not checked until progress
    job = store.get(outcome.job_id)
    assert job is not None
    assert "cannot be checked until the job reports progress" in (job.timeline[0].detail or "")


def test_the_emulator_scales_the_training_an_estimate_needs() -> None:
    # Given the job with step 20 reported after 2 minutes of training
    store, objects = training_on_spot(), FakeObjects()
    reported(objects, 20, 2)
    heartbeat(store, objects, FakeCommands(), 2.5)
    job = store.get(JOB)
    # When its work is estimated at AWS's scale and at the emulator's tenth of it
    # Then only the scaled 1-minute threshold is passed
    assert work_estimate(job, T0 + timedelta(minutes=3)) is None
    scaled = work_estimate(job, T0 + timedelta(minutes=3), ASSUMED.scaled(0.1))
    assert scaled is not None
    assert scaled.source == "progress: 20 steps in 0.03 h"


def test_an_older_report_does_not_replace_a_newer_one() -> None:
    # Given the step 100 of 20 minutes on the record, and a progress document of an earlier moment (step 20)
    store, objects = training_on_spot(), FakeObjects()
    reported(objects, 100, 20)
    heartbeat(store, objects, FakeCommands(), 20.5)
    reported(objects, 20, 5)
    # When a heartbeat reads it (a delayed read), Then the record keeps the newer step
    heartbeat(store, objects, FakeCommands(), 21)
    assert store.get(JOB).steps_reported.steps == 100

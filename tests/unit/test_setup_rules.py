"""training.setup and Setup.Failed without AWS: the manifest's rules and schema, the stage timeout, the workflow's
route, the failed job's record, and setup's time on the attempt and its timeline."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from spotrun.aws.settings import Settings
from spotrun.control.dispatch import dispatch_agent_step
from spotrun.control.finalize import finalize_job
from spotrun.control.views.job_json import job_record
from spotrun.model.agent_protocol.command import SETUP_FAILED, FailureCause, StageResult
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import JobStatus, ManifestSource, new_job, transition
from spotrun.model.manifest.parse import manifest_json_schema, parse_manifest_text
from spotrun.model.manifest.training import MAX_SETUP_COMMANDS
from spotrun.model.timing import workflow_timing
from spotrun.shape import REPO_ROOT
from tests.unit import test_limits as limits
from tests.unit.fakes import FakeCommands, FakeCompute, FakeObjects, InMemoryJobStore
from tests.unit.test_manifest import assert_one_error

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
JOB = "tiny-0123456789ab"


def manifest_text(training: str) -> str:
    return f"name: tiny\ntraining: {{command: [python, train.py], {training}}}\n"


# -- the manifest -------------------------------------------------------------------------------------------


def test_setup_is_a_list_of_argv_commands_with_a_thirty_minute_default_limit():
    # Given / When
    training = parse_manifest_text(
        manifest_text("setup: [[pip, install, -r, requirements.txt], [' python ', -V]]")
    ).training

    # Then each command is an argv list (stripped like command's arguments), in order
    assert training.setup == [["pip", "install", "-r", "requirements.txt"], ["python", "-V"]]
    assert training.setup_timeout_minutes == 30
    assert parse_manifest_text(manifest_text("env: {}")).training.setup == []


@pytest.mark.parametrize(
    ("training", "path", "fragment"),
    [
        pytest.param(
            "setup: [['pip install -r requirements.txt']]",
            "training.setup[0]",
            "not one shell string",
            id="a shell string",
        ),
        pytest.param("setup: [[]]", "training.setup[0]", "at least 1 item", id="an empty command"),
        pytest.param(
            "setup: [[pip, '']]", "training.setup[0][1]", "at least 1 character", id="empty argument"
        ),
        pytest.param(
            "setup: [pip, install]", "training.setup", "each an argv list", id="one argv, not a list of them"
        ),
        pytest.param(
            "setup: " + json.dumps([["true"]] * (MAX_SETUP_COMMANDS + 1)),
            "training.setup",
            f"at most {MAX_SETUP_COMMANDS} items",
            id="too many commands",
        ),
        pytest.param(
            "setup_timeout_minutes: 0", "training.setup_timeout_minutes", "greater than", id="no time"
        ),
        pytest.param(
            "setup_timeout_minutes: '5'", "training.setup_timeout_minutes", "not a text", id="timeout as text"
        ),
    ],
)
def test_a_bad_setup_is_refused_naming_its_field(training, path, fragment):
    # Given / When / Then
    assert_one_error(manifest_text(training), path, fragment)


def test_the_schema_gives_each_setup_command_the_commands_argv_rule():
    # Given the published manifest schema
    training = json.loads(manifest_json_schema())["$defs"]["TrainingSpec"]["properties"]

    # When command's own words are left aside
    command = {
        key: value for key, value in training["command"].items() if key not in {"title", "description"}
    }

    # Then each of setup's items is what command is: the same argv rule, stated once
    assert training["setup"]["items"] == command
    assert training["setup"]["maxItems"] == MAX_SETUP_COMMANDS
    assert {"minItems": 2} in training["command"]["anyOf"]


def test_the_stage_steps_timeout_leaves_room_for_setups_limit():
    # Given two manifests, one with an hour of setup allowed
    default = workflow_timing(parse_manifest_text(manifest_text("env: {}")), 1.0)
    long_setup = workflow_timing(parse_manifest_text(manifest_text("setup_timeout_minutes: 60")), 1.0)

    # Then the workflow's backstop on the stage step grows by exactly that limit
    assert long_setup.stage_timeout_seconds - default.stage_timeout_seconds == 30 * 60
    assert default.stage_timeout_seconds == 4 * 3600 + 30 * 60


# -- the workflow ------------------------------------------------------------------------------------------


def test_setup_failed_ends_the_job_from_the_stage_step_without_another_instance():
    # Given the workflow
    asl = json.loads((REPO_ROOT / "statemachines" / "job.asl.json").read_text())
    catches = asl["States"]["StageData"]["Catch"]

    # When the stage step fails with Setup.Failed, the first catch that matches it decides
    route = next(c for c in catches if SETUP_FAILED in c["ErrorEquals"] or "States.ALL" in c["ErrorEquals"])

    # Then it releases the capacity and records the failure: no relaunch (RecordInterruption) on a new instance
    assert route["Next"] == "ReleaseAfterFailure"
    assert asl["States"]["ReleaseAfterFailure"]["Next"] == "RecordFailure"


# -- the record --------------------------------------------------------------------------------------------


def running_job(store: InMemoryJobStore, status: JobStatus) -> None:
    document = parse_manifest_text(manifest_text("setup: [[pip, install, torch]]"))
    job = new_job(JOB, "tiny", ManifestSource(bucket="b", key="k", etag="e"), document, T0)
    attempt = Attempt(
        number=1,
        instance_id="i-0abc",
        instance_type="g4dn.xlarge",
        availability_zone="us-east-1a",
        lifecycle="spot",
        price_per_hour=0.2,
        started_at=T0,
    )
    job = job.model_copy(update={"attempts": [attempt]})
    for step in (JobStatus.ACQUIRING, JobStatus.BOOTING, JobStatus.STAGING, JobStatus.TRAINING):
        job = transition(job, step, T0)
        if step == status:
            break
    store.create(job)


def test_a_setup_failure_is_recorded_with_its_command_exit_code_and_log_tail():
    # Given a job whose stage step reported Setup.Failed
    store = InMemoryJobStore()
    running_job(store, JobStatus.STAGING)
    cause = FailureCause(
        message="setup command 1 of 1 ['pip', 'install', 'torch'] failed (exit code 1) after 3.2 s",
        exit_code=1,
        log_tail="ERROR: No matching distribution found for torch",
        log_key=f"jobs/{JOB}/logs/attempt-001.log",
    )

    # When the workflow records the failure
    job = finalize_job(
        job_id=JOB,
        outcome="FAILED",
        error={"Error": SETUP_FAILED, "Cause": cause.model_dump_json()},
        store=store,
        now=T0 + timedelta(minutes=5),
    )

    # Then the record's error says what failed, how, and the end of its output; the timeline says so too
    record = job_record(job)
    assert record["status"] == "FAILED"
    assert record["error"]["type"] == "Setup.Failed"
    assert "['pip', 'install', 'torch']" in record["error"]["message"]
    assert record["error"]["exit_code"] == 1
    assert "No matching distribution" in record["error"]["log_tail"]
    assert record["timeline"][-1]["detail"].startswith("Setup.Failed: setup command 1 of 1")


def test_setup_time_is_recorded_on_the_attempt_and_its_timeline_when_training_starts():
    # Given a staged job whose stage step reported 41.25 s of setup
    store = InMemoryJobStore()
    running_job(store, JobStatus.STAGING)
    document = parse_manifest_text(manifest_text("setup: [[pip, install, torch]]"))
    staged = StageResult(files=3, bytes=10, seconds=2.1, setup_seconds=41.25)

    # When the train step is dispatched
    objects = FakeObjects()
    dispatch_agent_step(
        job_id=JOB,
        step="train",
        task_token="token",
        timing=workflow_timing(document, 1.0),
        staged=staged,
        store=store,
        objects=objects,
        commands=FakeCommands(),
        settings=Settings(
            region="us-east-1",
            jobs_bucket="jobs-bucket",
            agent_document_name="spotrun-agent-run",
            agent_report_url="https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com/v1/agent/reports",
        ),
        now=T0 + timedelta(minutes=2),
    )

    # Then the attempt keeps the setup's seconds and the TRAINING entry of the timeline says how long it took
    record = job_record(store.get(JOB))  # type: ignore[arg-type]
    assert record["attempts"][0]["setup_seconds"] == 41.25
    assert record["timeline"][-1]["status"] == "TRAINING"
    assert record["timeline"][-1]["detail"] == "i-0abc: setup took 41.2 s"


def test_the_stage_command_carries_the_budgets_stop_time_for_setup():
    # Given a budgeted job on its first attempt, and one without a budget
    budgeted, free = limits.manifest(max_usd=0.05), limits.manifest()
    commands, attempts = {}, {}
    for name, document in (("budgeted", budgeted), ("free", free)):
        store, compute = InMemoryJobStore(), FakeCompute(price=limits.PRICE)
        limits.submitted(store, document)
        attempts[name] = limits.acquire(store, compute, limits.T0, document)

        # When its stage step is sent
        commands[name] = limits.dispatch(store, "stage", limits.T0 + timedelta(seconds=30), document)

    # Then the stage step may set up until the budget runs out at the attempt's price, less the margin
    affordable = 0.05 * 3600 / limits.PRICE
    expected = attempts["budgeted"].started_at + timedelta(seconds=affordable - 120)
    assert datetime.fromisoformat(commands["budgeted"]["stop_at"]) == expected
    assert commands["free"]["stop_at"] is None

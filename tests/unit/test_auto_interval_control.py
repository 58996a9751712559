"""checkpoint.interval_steps: auto in the control plane: the rate it sends the agent, and the record."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from spotrun import training
from spotrun.agent.supervision.command_environment import child_environment
from spotrun.aws.settings import Settings
from spotrun.control.agent_reports import AgentReport, CallerIdentity, answer_agent_report
from spotrun.control.dispatch import dispatch_agent_step
from spotrun.control.views.jobs import job_view
from spotrun.model import layout
from spotrun.model.agent_protocol.command import AgentCommand
from spotrun.model.job.attempt import Attempt, CheckpointIntervalUsed
from spotrun.model.job.interruption_rate import PRIOR_SPOT_HOURS, pool_rate, prior_rate
from spotrun.model.job.record import Job, JobStatus, ManifestSource
from spotrun.model.manifest.parse import parse_manifest_text
from spotrun.model.timing import workflow_timing
from tests.unit.fakes import FakeCommands, FakeObjects, FakeWorkflows, InMemoryJobStore
from tests.unit.test_auto_interval import JOB_ID, T0, manifest_text

# -- the rate the control plane sends -----------------------------------------------------------------------


def spot_attempt(number: int, hours: float, end_reason: str | None, notice: bool) -> Attempt:
    start = T0 + timedelta(hours=10 * number)
    return Attempt(
        number=number,
        instance_id=f"i-{number:04d}",
        instance_type="g5.xlarge",
        availability_zone="us-east-1a",
        lifecycle="spot",
        price_per_hour=0.3,
        started_at=start,
        ended_at=start + timedelta(hours=hours) if end_reason else None,
        end_reason=end_reason,
        notice_at=start + timedelta(hours=hours) if notice else None,
    )


def job_with(attempts: list[Attempt], checkpoint: str = "{interval_steps: auto}") -> Job:
    return Job(
        job_id=JOB_ID,
        name="tiny",
        status=JobStatus.TRAINING,
        source=ManifestSource(),
        manifest=parse_manifest_text(manifest_text(checkpoint)),
        created_at=T0,
        updated_at=T0,
        attempts=attempts,
        task_token="token",
    )


def test_a_new_job_gets_the_prior_and_its_history_moves_it():
    # Given a job with no attempt, and one with two interruptions in 6 spot hours, one of them silent
    fresh = pool_rate(job_with([]), T0)
    seen = job_with(
        [spot_attempt(1, 2, "interrupted", notice=True), spot_attempt(2, 4, "instance-lost", notice=False)]
    )
    # When the rates are estimated
    rate = pool_rate(seen, T0 + timedelta(days=2))
    # Then the prior alone, then (1 + 2) / (24 + 6) per hour with (0.05 + 1) / 3 silent
    assert fresh == prior_rate().model_copy(update={"basis": fresh.basis})
    assert fresh.interruptions_per_hour == pytest.approx(1 / PRIOR_SPOT_HOURS)
    assert rate.interruptions_per_hour == pytest.approx(3 / 30)
    assert rate.silent_fraction == pytest.approx(1.05 / 3)
    assert "2 interruption(s), 1 without notice, in 6.00 spot h" in rate.basis


def dispatched(job: Job) -> AgentCommand:
    store, objects = InMemoryJobStore(), FakeObjects()
    store.create(job)
    dispatch_agent_step(
        job_id=JOB_ID,
        step="train",
        task_token="token",
        timing=workflow_timing(job.require_manifest(), 1.0),
        staged=None,
        store=store,
        objects=objects,
        commands=FakeCommands(),
        settings=Settings(
            region="us-east-1",
            jobs_bucket="jobs-bucket",
            agent_document_name="spotrun-agent-run",
            agent_report_url="https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com/v1/agent/reports",
        ),
        now=T0 + timedelta(days=2),
    )
    [body] = objects.objects.values()
    return AgentCommand.model_validate(json.loads(body))


def test_the_train_command_of_an_auto_job_carries_the_jobs_rate_and_a_step_based_one_none():
    # Given an auto job that lost an attempt silently, and a step-based one
    history = [spot_attempt(1, 2, "instance-lost", notice=False), spot_attempt(2, 1, None, notice=False)]
    auto = dispatched(job_with(history))
    steps = dispatched(job_with(history, checkpoint="{interval_steps: 50}"))
    # When / Then the auto one's command holds the control plane's estimate
    assert auto.pool_rate == pool_rate(job_with(history), T0 + timedelta(days=2))
    assert steps.pool_rate is None


def test_a_rate_in_a_command_that_would_ignore_it_is_refused():
    # Given the train command of an auto job, as dispatched
    command = dispatched(job_with([spot_attempt(1, 1, None, notice=False)]))
    document = command.model_dump(mode="json")
    # When its rate is put on its stage step, or its manifest made step-based
    as_stage = {**document, "step": "stage"}
    step_based = json.loads(json.dumps(document))
    step_based["manifest"]["training"]["checkpoint"]["interval_steps"] = 50
    # Then both are refused; the command itself reads
    for refused in (as_stage, step_based):
        with pytest.raises(ValueError, match="pool_rate is for the train step"):
            AgentCommand.model_validate(refused)
    assert AgentCommand.model_validate(document).pool_rate is not None


def test_the_training_environment_under_auto_names_the_interval_file_not_a_step_count(tmp_path):
    # Given the train commands of an auto and of a step-based manifest
    def environment(checkpoint: str) -> dict[str, str]:
        command = dispatched(job_with([spot_attempt(1, 1, None, notice=False)], checkpoint=checkpoint))
        return child_environment(command, layout.NvmeLayout(tmp_path, JOB_ID), {})

    auto, steps = environment("{interval_steps: auto}"), environment("{interval_steps: 50}")
    # When / Then auto names the agent's file; the step count is set only for the other
    expected = str(layout.NvmeLayout(tmp_path, JOB_ID).checkpoint_interval_file(1))
    assert auto[training.ENV_CHECKPOINT_INTERVAL_FILE] == expected
    assert training.ENV_CHECKPOINT_INTERVAL_STEPS not in auto
    assert steps[training.ENV_CHECKPOINT_INTERVAL_STEPS] == "50"
    assert training.ENV_CHECKPOINT_INTERVAL_FILE not in steps


# -- the record ---------------------------------------------------------------------------------------------

USED = CheckpointIntervalUsed(interval_seconds=4321.0, why="daly interval 1.20 h from ...", save_seconds=12.0)


def beat(store: InMemoryJobStore, workflows: FakeWorkflows, used: CheckpointIntervalUsed | None) -> None:
    report = {"job_id": JOB_ID, "attempt": 1, "step": "train", "kind": "heartbeat"}
    if used is not None:
        report["checkpoint_interval"] = used.model_dump(mode="json")
    answer_agent_report(
        AgentReport.model_validate(report).root,
        identity=CallerIdentity(
            user_arn="arn:aws:sts::123456789012:assumed-role/spotrun-instances/i-0001",
            account_id="123456789012",
        ),
        instance_role_name="spotrun-instances",
        store=store,
        workflows=workflows,
    )


def test_a_heartbeat_with_the_interval_puts_it_and_why_on_the_attempt():
    # Given a training job whose instance beats with the interval it told the script
    store, workflows = InMemoryJobStore(), FakeWorkflows()
    store.create(job_with([spot_attempt(1, 1, None, notice=False)]))
    # When it beats once without, then twice with the interval
    beat(store, workflows, None)
    without = store.get(JOB_ID)
    beat(store, workflows, USED)
    beat(store, workflows, USED)
    job = store.get(JOB_ID)
    # Then the record's attempt holds it (written once: the second beat changes nothing), and every beat reached SFN
    assert without is not None
    assert without.attempts[0].checkpoint_interval is None
    assert job is not None
    assert job.attempts[0].checkpoint_interval == USED
    assert job.version == without.version + 1
    assert workflows.heartbeats == ["token"] * 3
    # and GET /jobs/{id} shows it
    shown = job_view(job).model_dump(mode="json")["attempts"][0]["checkpoint_interval"]
    assert shown == USED.model_dump(mode="json")

"""The agent-report decision: only the job's own instance, on the step the workflow waits on, is answered."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from spotrun.control.agent_reports import (
    AgentReport,
    CallerIdentity,
    FailureReport,
    HeartbeatReport,
    ReportInvalid,
    ReportNotWaited,
    ReportRefused,
    SuccessReport,
    TaskGone,
    answer_agent_report,
)
from spotrun.model.agent_protocol.command import StageResult, TrainResult
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import Job, JobStatus, ManifestSource
from tests.unit.fakes import FakeWorkflows, InMemoryJobStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ACCOUNT = "123456789012"
ROLE = "spotrun-instances"
TOKEN = "token-of-job-a"
STAGE_RESULT = {"files": 1, "bytes": 2, "seconds": 0.5}


def session(instance_id: str, role: str = ROLE, account: str = ACCOUNT) -> CallerIdentity:
    return CallerIdentity(
        user_arn=f"arn:aws:sts::{account}:assumed-role/{role}/{instance_id}", account_id=ACCOUNT
    )


def running_job(status: JobStatus = JobStatus.STAGING, ended: bool = False, token: str | None = TOKEN) -> Job:
    attempt = Attempt(
        number=1,
        instance_id="i-aaaa",
        instance_type="g5.xlarge",
        availability_zone="us-east-1a",
        lifecycle="spot",
        price_per_hour=0.3,
        started_at=NOW,
        ended_at=NOW if ended else None,
    )
    return Job(
        job_id="job-a-00000000000a",
        name="a",
        status=status,
        source=ManifestSource(),
        created_at=NOW,
        updated_at=NOW,
        attempts=[attempt],
        task_token=token,
    )


def answer(
    report: HeartbeatReport | SuccessReport | FailureReport, identity: CallerIdentity, job: Job | None = None
) -> FakeWorkflows:
    store, workflows = InMemoryJobStore(), FakeWorkflows()
    store.create(job or running_job())
    answer_agent_report(report, identity=identity, instance_role_name=ROLE, store=store, workflows=workflows)
    return workflows


def heartbeat(**fields: object) -> HeartbeatReport | SuccessReport | FailureReport:
    report = {"job_id": "job-a-00000000000a", "attempt": 1, "step": "stage", "kind": "heartbeat"} | fields
    return AgentReport.model_validate(report).root


def test_the_jobs_instance_answers_success_with_the_records_token() -> None:
    # Given the instance of job-a's open attempt reports staging's success
    report = heartbeat(kind="success", output=STAGE_RESULT)
    # When it is answered
    workflows = answer(report, session("i-aaaa"))
    # Then Step Functions gets the job record's token and the output
    expected = StageResult.model_validate(STAGE_RESULT).model_dump()
    assert [(token, json.loads(output)) for token, output in workflows.succeeded] == [(TOKEN, expected)]


def test_heartbeat_and_failure_are_answered_with_the_token() -> None:
    # Given the job's own instance
    # When it sends a heartbeat, then a failure
    beats = answer(heartbeat(), session("i-aaaa"))
    failed = answer(
        heartbeat(kind="failure", error="Staging.Failed", cause='{"message": "x"}'), session("i-aaaa")
    )
    # Then each reaches Step Functions on the job's token
    assert beats.heartbeats == [TOKEN]
    assert failed.failed == [(TOKEN, "Staging.Failed", '{"message": "x"}')]


def test_another_instance_is_refused_and_nothing_is_answered() -> None:
    # Given an instance that does not run job-a
    store, workflows = InMemoryJobStore(), FakeWorkflows()
    store.create(running_job())
    # When it reports job-a's success
    with pytest.raises(ReportRefused):
        answer_agent_report(
            heartbeat(kind="success", output=STAGE_RESULT),
            identity=session("i-bbbb"),
            instance_role_name=ROLE,
            store=store,
            workflows=workflows,
        )
    # Then the workflow heard nothing
    assert workflows.succeeded == []
    assert workflows.closed_tokens == set()


@pytest.mark.parametrize(
    "identity",
    [
        session("i-aaaa", role="someone-else"),  # the right session name under another role
        session("i-aaaa", account="210987654321"),  # the instance role's name in another account
        CallerIdentity(user_arn=f"arn:aws:iam::{ACCOUNT}:user/i-aaaa", account_id=ACCOUNT),  # a user
        CallerIdentity(user_arn=None, account_id=ACCOUNT),  # unsigned
    ],
    ids=["other-role", "other-account", "iam-user", "no-identity"],
)
def test_a_caller_that_is_not_an_instance_role_session_is_refused(identity: CallerIdentity) -> None:
    # Given a caller whose identity is not the deployment's instance role session
    # When it reports
    # Then it is refused
    with pytest.raises(ReportRefused):
        answer(heartbeat(), identity)


def test_an_unknown_job_is_refused_as_another_jobs() -> None:
    # Given no job of that id
    # When an instance reports for it
    # Then it is refused (the caller learns nothing of which jobs exist)
    with pytest.raises(ReportRefused):
        answer(heartbeat(job_id="job-z-00000000000f"), session("i-aaaa"))


def test_the_instance_of_an_ended_attempt_is_told_its_step_is_not_waited_on() -> None:
    # Given job-a's attempt on i-aaaa has ended (a node kept for the next attempt still runs its old step)
    # When i-aaaa reports
    # Then it hears that its step is no longer waited on (HTTP 409: the agent abandons the step)
    with pytest.raises(ReportNotWaited):
        answer(heartbeat(), session("i-aaaa"), running_job(ended=True))


@pytest.mark.parametrize(
    ("report", "job"),
    [
        (heartbeat(step="train"), running_job(JobStatus.STAGING)),  # another step than the one waited on
        (heartbeat(attempt=2), running_job()),  # another attempt
        (heartbeat(), running_job(token=None)),  # no token recorded
    ],
    ids=["step", "attempt", "no-token"],
)
def test_a_step_the_job_does_not_wait_on_is_not_answered(report: HeartbeatReport, job: Job) -> None:
    # Given the job's instance, but a step, attempt or token the job does not wait on
    # When it reports
    # Then the report is refused as not waited on
    with pytest.raises(ReportNotWaited):
        answer(report, session("i-aaaa"), job)


def test_a_task_step_functions_no_longer_waits_for_is_gone() -> None:
    # Given Step Functions answered the task already
    store, workflows = InMemoryJobStore(), FakeWorkflows()
    store.create(running_job())
    workflows.closed_tokens.add(TOKEN)
    # When the instance reports
    # Then the outcome is TaskGone
    with pytest.raises(TaskGone):
        answer_agent_report(
            heartbeat(), identity=session("i-aaaa"), instance_role_name=ROLE, store=store, workflows=workflows
        )


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "success"},
        {"kind": "failure", "error": "Staging.Failed"},
        {"kind": "success", "output": {"files": "many"}},
        {"kind": "reboot"},
        {"job_id": "../x"},
    ],
    ids=["success-without-output", "failure-without-cause", "bad-output", "unknown-kind", "job-id"],
)
def test_a_malformed_report_is_invalid(fields: dict[str, object]) -> None:
    # Given a report whose fields do not fit its kind
    # When it is read
    # Then it fails validation
    with pytest.raises(ValidationError):
        heartbeat(**fields)


def test_a_success_whose_result_is_not_its_steps_is_invalid() -> None:
    # Given the job's own instance reports staging's success with a train result
    train_result = {
        "seconds": 1.0,
        "outputs": {"key": "k", "count": 1, "bytes": 1},
        "model_key": "m",
        "model_sha256": "0" * 64,
        "log_key": "l",
    }
    report = heartbeat(kind="success", output=train_result)
    # When it is answered
    # Then it is refused as invalid, and nothing reaches the workflow
    with pytest.raises(ReportInvalid):
        answer(report, session("i-aaaa"))


TRAIN_RESULT = {
    "seconds": 1.5,
    "exit_code": 0,
    "last_checkpoint_step": 5,
    "last_step": 7,
    "outputs": {"key": "k", "count": 1, "bytes": 10},
    "model_key": "m",
    "model_sha256": "0" * 64,
    "log_key": "l",
}


def success_body(step: str, output: dict) -> dict:
    return {"job_id": "job-a-00000000000a", "attempt": 1, "step": step, "kind": "success", "output": output}


@pytest.mark.parametrize(
    ("step", "path", "value"),
    [
        ("stage", ("attempt",), True),
        ("stage", ("attempt",), "1"),
        ("stage", ("output", "files"), True),
        ("stage", ("output", "bytes"), "2"),
        ("stage", ("output", "seconds"), True),
        ("stage", ("output", "restored_step"), "3"),
        ("stage", ("output", "setup_seconds"), "0.5"),
        ("train", ("output", "seconds"), "1.5"),
        ("train", ("output", "exit_code"), False),
        ("train", ("output", "last_checkpoint_step"), "5"),
        ("train", ("output", "last_step"), True),
        ("train", ("output", "outputs", "count"), True),
        ("train", ("output", "outputs", "bytes"), "10"),
    ],
)
def test_a_report_s_numbers_are_json_numbers_not_booleans_or_texts(
    step: str, path: tuple[str, ...], value: object
) -> None:
    # Given a success report with one number given as a boolean or a text (pydantic's lax mode reads true as 1
    # and "2" as 2)
    body = json.loads(json.dumps(success_body(step, STAGE_RESULT if step == "stage" else TRAIN_RESULT)))
    target = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    # When it is validated
    # Then it is refused, naming the field
    with pytest.raises(ValidationError, match=path[-1]):
        AgentReport.model_validate(body)


def test_a_report_s_integral_floats_are_integers_as_json_schema_counts_them() -> None:
    # Given a train success report whose counts are integral floats (JSON Schema's "integer" allows 7.0)
    output = {
        **TRAIN_RESULT,
        "exit_code": 0.0,
        "last_step": 7.0,
        "outputs": {"key": "k", "count": 1.0, "bytes": 10},
    }
    body = {**success_body("train", output), "attempt": 1.0}
    # When it is validated
    report = AgentReport.model_validate(body).root
    # Then they are integers
    assert isinstance(report, SuccessReport)
    assert report.attempt == 1
    assert report.output == TrainResult.model_validate({**TRAIN_RESULT, "exit_code": 0, "last_step": 7})

"""`spotrun submit` attached to a (fake) terminal, `--detach`, `--wait`, Ctrl-C and `spotrun attach`, driving the
CLI against the in-process API (moto). The job is moved along its life by the poll's pause: each pause plays
the next step of a script on the stored record, as the workflow would."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from functions.api import app as api
from spotrun.aws.adapters import job_store
from spotrun.cli import attach, target
from spotrun.cli.app import app
from spotrun.cli.client import ApiError, SpotrunClient
from spotrun.control.ports import JobStore
from spotrun.local.api.gateway import rest_event
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import Job, JobError, JobStatus, transition, utc_now
from spotrun.model.layout import log_key
from tests.integration.api_client import TINY

runner = CliRunner()
Step = Callable[[Job], Job]


class InProcessClient(SpotrunClient):
    """The CLI's client, its requests handled by the API function in this process (as API Gateway would)."""

    def __init__(self, context: Any) -> None:
        super().__init__("https://in-process.example")
        self.context = context
        self.calls: list[tuple[str, str]] = []

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        self.calls.append((method, path))
        query = {k: str(v) for k, v in (kwargs.get("query") or {}).items() if v is not None}
        body = b"" if kwargs.get("body") is None else json.dumps(kwargs["body"]).encode()
        headers = {"Content-Type": "application/json", **(kwargs.get("headers") or {})}
        event = rest_event(method, path, urllib.parse.urlencode(query), headers, body)
        with contextlib.redirect_stdout(io.StringIO()):  # the metrics lines Powertools prints: not the CLI's
            result = api.handler(event, self.context)
        answer = json.loads(result.get("body") or "null")
        if result["statusCode"] >= 400:
            raise ApiError(result["statusCode"], answer["message"], answer.get("errors"))
        return answer


class Script:
    """What each pause of the view does to the job: the next step, applied to its stored record."""

    def __init__(self, store: JobStore, steps: list[Step]) -> None:
        self.store, self.steps, self.pauses, self.job_id = store, list(steps), 0, ""

    def pause(self, seconds: float) -> None:
        self.pauses += 1
        if not self.steps:
            raise AssertionError("the view polled past the end of the script")
        step = self.steps.pop(0)
        job = self.store.get(self.job_id)
        assert job is not None
        self.store.save(step(job))


@pytest.fixture
def cli(deployment, lambda_context, monkeypatch) -> tuple[InProcessClient, JobStore]:
    """Every API command talks to the in-process API; stdout stands for a terminal unless a test says not."""
    client = InProcessClient(lambda_context)
    monkeypatch.setattr(target, "resolve_client", lambda _target: client)
    monkeypatch.setattr(attach, "on_terminal", lambda: True)
    return client, job_store(deployment.jobs_table, deployment.region)


def play(monkeypatch: pytest.MonkeyPatch, store: JobStore, steps: list[Step]) -> Script:
    script = Script(store, steps)
    monkeypatch.setattr(attach, "pause", script.pause)
    original = InProcessClient.submit

    def submit(self: InProcessClient, manifest: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        answer = original(self, manifest, key)
        script.job_id = answer["job_id"]
        return answer

    monkeypatch.setattr(InProcessClient, "submit", submit)
    return script


def manifest_file(tmp_path, **changes: Any) -> str:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({**TINY, **changes}))
    return str(path)


def later(job: Job) -> Any:
    """Now, a little after the job's last change: every stamp is in the past (the cost so far is computed up to
    now) and after the one before."""
    time.sleep(0.002)
    return utc_now()


def moved(*statuses: JobStatus, detail: str | None = None) -> Step:
    def step(job: Job) -> Job:
        for status in statuses:
            job = transition(job, status, later(job), detail)
        return job

    return step


def attempt(number: int) -> Step:
    def step(job: Job) -> Job:
        started = later(job)
        new = Attempt(
            number=number,
            instance_id=f"i-000000000000000{number}",
            instance_type="g4dn.xlarge",
            availability_zone="us-east-1a",
            lifecycle="spot",
            price_per_hour=0.1578,
            started_at=started,
        )
        job = job.model_copy(update={"attempts": [*job.attempts, new]})
        return transition(job, JobStatus.BOOTING, later(job))

    return step


def resumed(step: int) -> Step:
    """Staging restores the committed checkpoint of ``step``: recorded with the move to TRAINING, as dispatch does."""

    def move(job: Job) -> Job:
        job = transition(job, JobStatus.STAGING, later(job), job.attempts[-1].instance_id)
        restored = job.attempts[-1].model_copy(
            update={
                "checkpoint_restored": f"s3://jobs/checkpoints/{job.job_id}/step-{step}/",
                "restored_step": step,
            }
        )
        job = job.model_copy(update={"attempts": [*job.attempts[:-1], restored]})
        return transition(job, JobStatus.TRAINING, later(job), restored.instance_id)

    return move


def warned(job: Job) -> Job:
    current = job.attempts[-1].model_copy(update={"notice_at": later(job)})
    return job.model_copy(update={"attempts": [*job.attempts[:-1], current]})


def interrupted(job: Job) -> Job:
    ended = job.attempts[-1].model_copy(
        update={"ended_at": later(job), "end_reason": "interrupted", "steps_lost": 12, "last_step": 162}
    )
    job = job.model_copy(update={"attempts": [*job.attempts[:-1], ended]})
    return moved(JobStatus.INTERRUPTED, JobStatus.ACQUIRING)(job)


def completed(job: Job) -> Job:
    ended = job.attempts[-1].model_copy(update={"ended_at": later(job), "end_reason": "completed"})
    job = job.model_copy(update={"attempts": [*job.attempts[:-1], ended]})
    return moved(JobStatus.ARCHIVING, JobStatus.SUCCEEDED)(job)


def failed(error_type: str) -> Step:
    def step(job: Job) -> Job:
        job = job.model_copy(update={"error": JobError(type=error_type, message="stopped")})
        return transition(job, JobStatus.FAILED, later(job))

    return step


INTERRUPTED_RUN = [
    moved(JobStatus.ACQUIRING),
    attempt(1),
    moved(JobStatus.STAGING, JobStatus.TRAINING),
    warned,
    interrupted,
    attempt(2),
    resumed(150),
    completed,
]


def lines_after(text: str, *expected: str) -> None:
    """Each of ``expected`` appears in ``text``, in that order."""
    at = 0
    for part in expected:
        found = text.find(part, at)
        assert found >= 0, f"{part!r} not after position {at} in:\n{text}"
        at = found + len(part)


def test_on_a_terminal_submit_follows_the_job_through_an_interruption_to_its_end(
    cli, monkeypatch, tmp_path
) -> None:
    # Given a terminal, and a job that is interrupted once and then succeeds
    script = play(monkeypatch, cli[1], INTERRUPTED_RUN)
    # When it is submitted
    result = runner.invoke(app, ["submit", manifest_file(tmp_path)])
    # Then each change is one timed line, as it happens, then the summary; the exit code says it succeeded
    assert result.exit_code == 0, result.output + result.stderr
    lines_after(
        result.stdout,
        "SUBMITTED",
        "ACQUIRING",
        "attempt 1: g4dn.xlarge in us-east-1a, spot at $0.1578/h (i-0000000000000001)",
        "BOOTING",
        "STAGING",
        "TRAINING",
        "attempt 1: spot interruption warning for i-0000000000000001; checkpointing",
        "attempt 1 ended: interrupted, 12 steps lost",
        "INTERRUPTED",
        "ACQUIRING",
        "attempt 2: g4dn.xlarge",
        "BOOTING",
        "STAGING: i-0000000000000002",
        "TRAINING: i-0000000000000002",
        "attempt 2: resumes from the checkpoint of step 150",
        "attempt 2 ended: completed",
        "ARCHIVING",
        "SUCCEEDED",
        "status: SUCCEEDED",
    )
    assert result.stdout.count("TRAINING\n") == 1  # each change once, however many polls saw it
    assert result.stdout.count("TRAINING: i-0000000000000002\n") == 1
    assert result.stdout.count("resumes from") == 1
    assert script.pauses == len(INTERRUPTED_RUN)


def test_the_exit_code_follows_how_the_job_ended_on_a_terminal_and_with_wait_off_one(
    cli, monkeypatch, tmp_path
) -> None:
    # Given a job that stops at its budget
    play(monkeypatch, cli[1], [moved(JobStatus.ACQUIRING), failed("Budget.Exceeded")])
    # When it is submitted on a terminal
    result = runner.invoke(app, ["submit", manifest_file(tmp_path)])
    # Then the view ends with the summary and exit code 3 (budget)
    assert result.exit_code == 3, result.output + result.stderr
    assert "status: FAILED (Budget.Exceeded)" in result.stdout
    # Given a pipe, and a job that stops at its runtime limit
    monkeypatch.setattr(attach, "on_terminal", lambda: False)
    play(monkeypatch, cli[1], [moved(JobStatus.ACQUIRING), failed("Training.MaxRuntimeExceeded")])
    # When it is submitted with --wait --json
    file = manifest_file(tmp_path, name="runtime")
    result = runner.invoke(app, ["submit", file, "--wait", "--poll", "0.05", "--json"])
    # Then it is followed to its end: stdout is the ended job alone, the exit code 4 (runtime)
    assert result.exit_code == 4, result.output + result.stderr
    assert json.loads(result.stdout)["status"] == "FAILED"
    assert "ACQUIRING" in result.stderr  # the view went to stderr


def test_ctrl_c_detaches_says_how_to_come_back_and_attach_follows_to_the_end(
    cli, monkeypatch, tmp_path
) -> None:
    # Given a job followed on a terminal, training, when Ctrl-C is pressed
    client, store = cli

    def ctrl_c(job: Job) -> Job:
        raise KeyboardInterrupt

    script = play(monkeypatch, store, [moved(JobStatus.ACQUIRING), attempt(1), ctrl_c])
    submitted = runner.invoke(app, ["submit", manifest_file(tmp_path)])
    # Then the command detaches (130) with the way back, and the job keeps running: nothing cancelled it
    assert submitted.exit_code == 130, submitted.output + submitted.stderr
    job_id = script.job_id
    assert f"spotrun attach {job_id}" in submitted.stderr
    assert f"spotrun logs {job_id} --follow" in submitted.stderr
    assert store.get(job_id).status is JobStatus.BOOTING
    assert ("DELETE", f"/jobs/{job_id}") not in client.calls
    # And its manifest submitted again from a pipe starts nothing, and says where the job stands
    monkeypatch.setattr(attach, "on_terminal", lambda: False)
    again = runner.invoke(app, ["submit", manifest_file(tmp_path)])
    assert again.stdout == f"job {job_id} duplicate: already submitted, BOOTING now\n"
    monkeypatch.setattr(attach, "on_terminal", lambda: True)
    # When `spotrun attach` (the latest job) re-enters the view
    script.steps = [moved(JobStatus.STAGING, JobStatus.TRAINING), completed]
    attached = runner.invoke(app, ["attach"])
    # Then it shows the job's history so far, then follows it to its end
    assert attached.exit_code == 0, attached.output + attached.stderr
    lines_after(
        attached.stdout, "SUBMITTED", "attempt 1:", "BOOTING", "TRAINING", "SUCCEEDED", "status: SUCCEEDED"
    )


def test_off_a_terminal_or_detached_submit_prints_the_id_at_once(cli, monkeypatch, tmp_path) -> None:
    # Given a job that would move if the command followed it
    script = play(monkeypatch, cli[1], [moved(JobStatus.ACQUIRING)])
    # When it is submitted on a terminal with --detach, Then the id is printed at once and nothing is polled
    detached = runner.invoke(app, ["submit", manifest_file(tmp_path), "--detach"])
    assert detached.exit_code == 0, detached.stderr
    assert detached.stdout == f"job {script.job_id} started\n"
    # And with --json on a terminal, stdout is the API's answer alone: no live view
    answer = runner.invoke(app, ["submit", manifest_file(tmp_path, name="other"), "--json"])
    assert answer.exit_code == 0, answer.stderr
    assert json.loads(answer.stdout)["outcome"] == "started"
    # And off a terminal (a pipe), as well
    monkeypatch.setattr(attach, "on_terminal", lambda: False)
    piped = runner.invoke(app, ["submit", manifest_file(tmp_path, name="third")])
    assert piped.stdout == f"job {script.job_id} started\n"
    assert script.pauses == 0


def test_resubmitting_the_manifest_of_an_ended_job_says_so_and_how_to_run_it_again(
    cli, monkeypatch, tmp_path
) -> None:
    # Given a job that ran to its end
    file = manifest_file(tmp_path)
    steps = [moved(JobStatus.ACQUIRING), attempt(1), moved(JobStatus.STAGING, JobStatus.TRAINING), completed]
    script = play(monkeypatch, cli[1], steps)
    assert runner.invoke(app, ["submit", file]).exit_code == 0
    # When the same manifest is submitted again, on a terminal
    again = runner.invoke(app, ["submit", file])
    # Then nothing is started nor followed: it says the job ended, and how to run it again
    assert again.exit_code == 0, again.stderr
    assert f"job {script.job_id} started" not in again.stdout
    assert "duplicate" not in again.stdout
    assert f"job {script.job_id} already ran this manifest: it ended SUCCEEDED" in again.stdout
    assert "--idempotency-key NEW-KEY" in again.stdout
    assert script.pauses == 4
    # And with --json the answer is the API's duplicate, the note on stderr
    answer = runner.invoke(app, ["submit", file, "--json"])
    assert json.loads(answer.stdout)["outcome"] == "duplicate"
    assert "already ran" in answer.stderr
    # And a new key runs it again
    fresh = runner.invoke(app, ["submit", file, "--idempotency-key", "again-1", "--detach"])
    assert fresh.stdout.endswith(" started\n")
    assert len(boto3.client("stepfunctions").list_executions(stateMachineArn=_machine())["executions"]) == 2


def _machine() -> str:
    return boto3.client("stepfunctions").list_state_machines()["stateMachines"][0]["stateMachineArn"]


def test_the_log_tail_is_read_over_the_attempts_newest_last(cli, deployment, monkeypatch, tmp_path) -> None:
    # Given a job with two attempts whose logs are in the jobs bucket
    script = play(monkeypatch, cli[1], [])
    monkeypatch.setattr(attach, "on_terminal", lambda: False)
    runner.invoke(app, ["submit", manifest_file(tmp_path)])
    store = cli[1]
    job = store.get(script.job_id)
    store.save(attempt(2)(attempt(1)(moved(JobStatus.ACQUIRING)(job))))
    s3 = boto3.client("s3")
    for number, text in ((1, "a1\na2\na3\n"), (2, "b1\nb2\n")):
        s3.put_object(Bucket=deployment.jobs_bucket, Key=log_key(script.job_id, number), Body=text.encode())
    # When the view reads its tail
    # Then it is the last lines over both attempts; an unknown job's is empty, never an error
    assert attach.log_tail(cli[0], script.job_id, lines=3) == ["a3", "b1", "b2"]
    assert attach.log_tail(cli[0], "no-such-job-000") == []
    assert JobStatus(cli[0].get_job(script.job_id)["status"]) is JobStatus.BOOTING


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
def test_submit_wait_prints_the_job_id_before_it_follows_the_job(
    cli, monkeypatch, tmp_path, terminal
) -> None:
    # Given a job that runs a while, and stdout a terminal or not
    monkeypatch.setattr(attach, "on_terminal", lambda: terminal)
    seen_at_first_poll: list[str] = []

    def look(job: Job) -> Job:
        # What a reader of stdout has when the view first waits: written out, not held in a buffer
        seen_at_first_poll.append(sys.stdout.buffer.getvalue().decode())
        return moved(JobStatus.ACQUIRING)(job)

    script = play(
        monkeypatch, cli[1], [look, attempt(1), moved(JobStatus.STAGING, JobStatus.TRAINING), completed]
    )
    # When it is submitted with --wait
    result = runner.invoke(app, ["submit", manifest_file(tmp_path), "--wait", "--poll", "0.05"])
    # Then its id was the first line out, before the first poll, and the view followed it to its end
    assert result.exit_code == 0, result.output + result.stderr
    assert seen_at_first_poll[0].startswith(f"job {script.job_id} started\n"), seen_at_first_poll
    assert result.stdout.count(f"job {script.job_id} started\n") == 1
    lines_after(result.stdout, f"job {script.job_id} started", "SUBMITTED", "TRAINING", "status: SUCCEEDED")

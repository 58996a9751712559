"""``spotrun logs --follow``: the follower's cursor and headers, the exit code of the job, the refused --json."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from spotrun.cli.app import app
from spotrun.cli.logs import DEFAULT_POLL_SECONDS, AttemptHeader, LogFollower, LogLine, follow


def _entry(attempt: int, lines: list[str], source: str = "live") -> dict[str, Any]:
    return {
        "attempt": attempt,
        "key": f"jobs/j/logs/attempt-{attempt:03d}.log",
        "stream": f"j/attempt-{attempt:03d}",
        "source": source,
        "found": source != "none",
        "lines": lines,
        "truncated": False,
    }


class ScriptedClient:
    """Answers the log polls and job views it is given, in turn, and records the calls."""

    def __init__(self, answers: list[dict[str, Any]], views: list[dict[str, Any]] | None = None):
        self.answers = answers
        self.views = views or []
        self.calls: list[dict[str, Any]] = []
        self.job_ids: list[str] = []

    def logs(self, job_id: str, **query: Any) -> dict[str, Any]:
        self.calls.append(query)
        self.job_ids.append(job_id)
        return self.answers.pop(0)

    def get_job(self, job_id: str) -> dict[str, Any]:
        return self.views.pop(0) if len(self.views) > 1 else self.views[0]

    def list_jobs(self, limit: int) -> dict[str, Any]:
        return {"jobs": [{"job_id": "newest-0123456789ab"}]}


def test_the_follower_reads_the_tail_then_only_what_follows_with_a_header_per_new_attempt():
    # Given an API that answers a tail, then the rest of attempt 1 and the start of attempt 2
    client = ScriptedClient(
        [
            {"job_id": "j", "logs": [_entry(1, ["a", "b"])], "next_token": "t1"},
            {"job_id": "j", "logs": [_entry(1, ["c"]), _entry(2, ["d"])], "next_token": "t2"},
        ]
    )
    follower = LogFollower(client, "j", tail=2)  # type: ignore[arg-type]

    # When it polls twice
    first, second = follower.poll(), follower.poll()

    # Then the second poll passes the first answer's cursor, and each attempt gets one header
    assert client.calls == [
        {"attempt": None, "tail": 2},
        {"attempt": None, "next_token": "t1"},
    ]
    assert first == [AttemptHeader(1, "j/attempt-001 (live)", False), LogLine(1, "a"), LogLine(1, "b")]
    assert follower.render(second) == ["c", "== attempt 2: j/attempt-002 (live)", "d"]


def test_an_attempt_followed_before_its_log_exists_gets_its_header_again_once_it_has_one():
    # Given a follower started while attempt 1 still boots: no log yet, then its live stream, then its upload
    client = ScriptedClient(
        [
            {"job_id": "j", "logs": [_entry(1, [], source="none")], "next_token": "t1"},
            {"job_id": "j", "logs": [_entry(1, [], source="none")], "next_token": "t2"},
            {"job_id": "j", "logs": [_entry(1, ["a"])], "next_token": "t3"},
            {"job_id": "j", "logs": [_entry(1, ["b"], source="s3")], "next_token": "t4"},
        ]
    )
    follower = LogFollower(client, "j")  # type: ignore[arg-type]

    # When it polls four times
    printed = [line for _ in range(4) for line in follower.render(follower.poll())]

    # Then "no log yet" is said once, the live header comes where the lines begin, and the upload adds none
    assert printed == [
        "== attempt 1: jobs/j/logs/attempt-001.log (no log yet)",
        "== attempt 1: j/attempt-001 (live)",
        "a",
        "b",
    ]


class EndingJob(ScriptedClient):
    """A job that writes its last line as it ends: the line is there once its FAILED status can be read."""

    def __init__(self) -> None:
        super().__init__([])
        self.views_read = 0

    def get_job(self, job_id: str) -> dict[str, Any]:
        self.views_read += 1
        if self.views_read == 1:
            return {"job_id": job_id, "status": "TRAINING"}
        return {"job_id": job_id, "status": "FAILED", "error": {"type": "Budget.Exceeded"}}

    def logs(self, job_id: str, **query: Any) -> dict[str, Any]:
        written = ["step 1"] + (["stopped"] if self.views_read >= 2 else [])
        start = 0 if query.get("next_token") is None else int(query["next_token"])
        return {"job_id": job_id, "logs": [_entry(1, written[start:])], "next_token": str(len(written))}


def test_follow_prints_until_the_job_ends_and_answers_its_exit_code(capsys: pytest.CaptureFixture[str]):
    # Given a job training, that then ends at its budget with a last line
    client = EndingJob()

    # When it is followed
    code = follow(client, LogFollower(client, "j"), poll_seconds=0.01)  # type: ignore[arg-type]

    # Then every line was printed, the one written as it ended too, and the exit code is the budget's
    assert capsys.readouterr().out.splitlines()[-2:] == ["step 1", "stopped"]
    assert code == 3


def test_follow_with_json_is_refused_as_one_json_object():
    # When --follow and --json are given together
    result = CliRunner().invoke(app, ["logs", "some-0123456789ab", "--follow", "--json"])

    # Then it is a usage error, said as one JSON object on stdout
    assert result.exit_code == 2
    assert "--follow" in json.loads(result.stdout)["error"]["message"]


def test_without_an_id_the_newest_job_is_read(monkeypatch: pytest.MonkeyPatch):
    # Given an API listing jobs newest first
    client = ScriptedClient(
        [{"job_id": "newest-0123456789ab", "logs": [_entry(1, ["x"])], "next_token": "t"}]
    )

    @contextlib.contextmanager
    def fake_client(target: Any) -> Iterator[ScriptedClient]:
        yield client

    monkeypatch.setattr("spotrun.cli.logs.api_client", fake_client)

    # When `spotrun logs` is given no id
    result = CliRunner().invoke(app, ["logs"])

    # Then the newest job's log is printed
    assert result.exit_code == 0, result.output
    assert client.job_ids == ["newest-0123456789ab"]
    assert result.stdout.splitlines() == ["== attempt 1: j/attempt-001 (live)", "x"]


def test_ctrl_c_stops_following_quietly_with_the_interrupt_exit_code(monkeypatch: pytest.MonkeyPatch):
    # Given a follow that the user interrupts while it waits
    client = ScriptedClient([{"job_id": "j", "logs": [], "next_token": "t"}])

    def interrupted(job_id: str) -> dict[str, Any]:
        raise KeyboardInterrupt

    monkeypatch.setattr(client, "get_job", interrupted)

    @contextlib.contextmanager
    def fake_client(target: Any) -> Iterator[ScriptedClient]:
        yield client

    monkeypatch.setattr("spotrun.cli.logs.api_client", fake_client)

    # When Ctrl-C comes, Then the command ends with 130 and prints nothing (no traceback)
    result = CliRunner().invoke(app, ["logs", "j-0123456789ab", "--follow"])
    assert result.exit_code == 130
    assert result.output == ""


def test_follow_takes_the_attempt_tail_and_poll_given_and_poll_alone_is_refused(
    monkeypatch: pytest.MonkeyPatch,
):
    # Given an API client, and a follow that records what it was given
    client = ScriptedClient([])
    given: list[tuple[str, int | None, int, float]] = []

    @contextlib.contextmanager
    def fake_client(target: Any) -> Iterator[ScriptedClient]:
        yield client

    def recorded(client: Any, follower: LogFollower, poll_seconds: float) -> int:
        given.append((follower.job_id, follower.attempt, follower.tail, poll_seconds))
        return 0

    monkeypatch.setattr("spotrun.cli.logs.api_client", fake_client)
    monkeypatch.setattr("spotrun.cli.logs.follow", recorded)

    # When logs are followed with each option, then with the default poll, then --poll is given without --follow
    chosen = CliRunner().invoke(
        app, ["logs", "j-0123456789ab", "-f", "--attempt", "2", "--tail", "7", "--poll", "0.25"]
    )
    default = CliRunner().invoke(app, ["logs", "j-0123456789ab", "--follow"])
    alone = CliRunner().invoke(app, ["logs", "j-0123456789ab", "--poll", "0.25"])

    # Then the follow got them, or the default poll; --poll alone is a usage error naming --follow
    assert chosen.exit_code == default.exit_code == 0, chosen.output
    assert given == [("j-0123456789ab", 2, 7, 0.25), ("j-0123456789ab", None, 200, DEFAULT_POLL_SECONDS)]
    assert alone.exit_code == 2
    assert "--follow" in alone.output

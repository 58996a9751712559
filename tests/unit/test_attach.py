"""The live view's plain functions: the events between two job views, the lines redrawn under them, when
``submit`` follows, the note of an ended duplicate, and Ctrl-C under --json."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from spotrun.cli import attach, target
from spotrun.cli.app import app
from spotrun.cli.attach import Event, job_events, live_view, should_follow, status_line
from spotrun.cli.display.output import json_answer

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def running_view() -> dict[str, Any]:
    """A job training on its first attempt, as ``GET /jobs/{id}`` shows it."""
    return {
        "job_id": "tiny-1",
        "status": "TRAINING",
        "updated_at": at(40),
        "timeline": [
            {"status": "SUBMITTED", "at": at(0)},
            {"status": "ACQUIRING", "at": at(1)},
            {"status": "BOOTING", "at": at(3), "detail": "i-1 in us-east-1a"},
            {"status": "TRAINING", "at": at(30), "detail": "i-1"},
        ],
        "attempts": [
            {
                "number": 1,
                "instance_id": "i-1",
                "instance_type": "g4dn.xlarge",
                "availability_zone": "us-east-1a",
                "lifecycle": "spot",
                "price_per_hour": 0.1578,
                "started_at": at(2),
            }
        ],
        "progress": {"attempt": 1, "step": 164, "cost_usd": 0.0012},
    }


def texts(events: list[Event]) -> list[str]:
    return [event.text for event in events]


def test_the_first_view_is_the_jobs_history_in_time_order() -> None:
    # Given a training job seen for the first time
    # When its events are computed
    events = job_events(None, running_view())
    # Then they are its state changes (with their detail) and its attempt, oldest first, each with its time
    assert texts(events) == [
        "SUBMITTED",
        "ACQUIRING",
        "attempt 1: g4dn.xlarge in us-east-1a, spot at $0.1578/h (i-1)",
        "BOOTING: i-1 in us-east-1a",
        "TRAINING: i-1",
    ]
    assert events[2].line().plain == "12:00:02  attempt 1: g4dn.xlarge in us-east-1a, spot at $0.1578/h (i-1)"


def test_an_interruption_shows_as_it_happens_then_the_new_attempt() -> None:
    # Given the view before, and then after, a spot interruption and the next attempt
    before = running_view()
    warned = copy.deepcopy(before)
    warned["attempts"][0].update(rebalance_at=at(50), notice_at=at(60))
    after = copy.deepcopy(warned)
    after["attempts"][0].update(ended_at=at(62), end_reason="interrupted", steps_lost=12)
    after["timeline"] += [{"status": "INTERRUPTED", "at": at(63)}, {"status": "ACQUIRING", "at": at(64)}]
    after["attempts"].append(
        {**after["attempts"][0], "number": 2, "instance_id": "i-2", "started_at": at(65), "ended_at": None}
    )
    after["attempts"][1].update(notice_at=None, rebalance_at=None, end_reason=None, steps_lost=None)
    # When the events of each poll are computed
    # Then the warning comes first, then the attempt's end with its loss, the states, the new attempt
    assert texts(job_events(before, warned)) == [
        "attempt 1: EC2 recommends a rebalance (spot capacity at risk)",
        "attempt 1: spot interruption warning for i-1; checkpointing",
    ]
    assert texts(job_events(warned, after)) == [
        "attempt 1 ended: interrupted, 12 steps lost",
        "INTERRUPTED",
        "ACQUIRING",
        "attempt 2: g4dn.xlarge in us-east-1a, spot at $0.1578/h (i-2)",
    ]
    # And a view seen again says nothing new
    assert job_events(after, after) == []


def test_a_restored_checkpoint_and_a_deadline_move_are_said() -> None:
    # Given an attempt that resumed from a committed checkpoint, then moved by the deadline policy
    before = running_view()
    after = copy.deepcopy(before)
    after["attempts"][0].update(
        checkpoint_restored="s3://jobs/checkpoints/tiny-1/step-150/", restored_step=150, notice_at=at(70)
    )
    after["attempts"][0]["deadline_move"] = True
    # When the events are computed, Then both are said
    assert texts(job_events(before, after)) == [
        "attempt 1: resumes from the checkpoint of step 150",
        "attempt 1: the deadline policy moves the job to on-demand; checkpointing",
    ]


def resumed_run() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Attempt 2 of a job, booting while attempt 1 commits its notice checkpoint (at 64 s), then staging and
    training from it: the views while it stages, when the restore is recorded, and before its own TRAINING."""
    staging = running_view()
    staging["attempts"][0].update(notice_at=at(60), ended_at=at(66), end_reason="interrupted")
    staging["attempts"].append(
        {**staging["attempts"][0], "number": 2, "instance_id": "i-2", "started_at": at(62)}
    )
    staging["attempts"][1].update(notice_at=None, ended_at=None, end_reason=None)
    staging["timeline"] += [
        {"status": "INTERRUPTED", "at": at(66)},
        {"status": "BOOTING", "at": at(67), "detail": "i-2 in us-east-1a"},
        {"status": "STAGING", "at": at(80), "detail": "i-2"},
    ]
    trained = copy.deepcopy(staging)
    trained["attempts"][1].update(
        checkpoint_restored="s3://jobs/checkpoints/tiny-1/step-150/", restored_step=150
    )
    trained["timeline"].append({"status": "TRAINING", "at": at(95), "detail": "i-2: setup took 9.0 s"})
    unstamped = copy.deepcopy(trained)
    unstamped["timeline"].pop()
    return staging, trained, unstamped


def test_a_resume_is_said_when_the_attempt_trains_from_the_committed_checkpoint_not_at_its_start() -> None:
    # Given an attempt that started (62 s) before the checkpoint it resumes from was committed (64 s)
    staging, trained, _ = resumed_run()
    # When the view sees it staging, then training from the checkpoint
    during = job_events(None, staging)
    events = job_events(staging, trained)
    # Then nothing is said of a resume while it stages; it is said once it trains, stamped with that time,
    # after STAGING and right after its TRAINING
    assert not any("resumes from" in text for text in texts(during))
    assert texts(events) == [
        "TRAINING: i-2: setup took 9.0 s",
        "attempt 2: resumes from the checkpoint of step 150",
    ]
    assert events[1].at == T0 + timedelta(seconds=95)
    first_view = job_events(None, trained)
    assert texts(first_view)[-2:] == texts(events)
    assert [e.at for e in first_view] == sorted(e.at for e in first_view)
    # And said once, however many polls see it
    assert job_events(trained, trained) == []


def test_a_resume_is_said_only_from_a_committed_checkpoints_fact() -> None:
    # Given an attempt whose restored step is known but no committed checkpoint is named, and one whose restore
    # is recorded but whose TRAINING on its instance is not
    _, trained, unstamped = resumed_run()
    no_prefix = copy.deepcopy(trained)
    no_prefix["attempts"][1]["checkpoint_restored"] = None
    # When the events are computed, Then neither says it resumes
    for view in (no_prefix, unstamped):
        assert not any("resumes from" in text for text in texts(job_events(None, view)))


def test_a_deadline_move_from_on_demand_is_said_as_the_return_to_spot() -> None:
    # Given an on-demand attempt moved by the deadline policy
    before = running_view()
    before["attempts"][0]["lifecycle"] = "on-demand"
    after = copy.deepcopy(before)
    after["attempts"][0].update(notice_at=at(70), deadline_move=True)
    # When the events are computed, Then the move is said as the way back to spot
    assert texts(job_events(before, after)) == [
        "attempt 1: the deadline policy moves the job back to spot; checkpointing"
    ]


def test_the_lines_under_the_events_show_the_log_tail_step_and_cost() -> None:
    # Given a training job and the tail of its log
    view = running_view()
    # When the live part is rendered
    out = Console(record=True, width=200)
    out.print(live_view(view, ["epoch 3 loss 0.12"]))
    text = out.export_text()
    # Then it has the log tail, the job's state and instance, its step and its cost so far
    assert "epoch 3 loss 0.12" in text
    assert "job tiny-1: TRAINING on g4dn.xlarge (spot)" in text
    assert "step 164" in text
    assert "cost so far $0.0012" in text
    # And once the attempt has ended, no instance is named
    view["attempts"][0]["ended_at"] = at(90)
    assert status_line({**view, "progress": None}).plain == "job tiny-1: TRAINING"


@pytest.mark.parametrize(
    ("terminal", "wait", "detach", "as_json", "follows"),
    [
        (True, False, False, False, True),  # a person at a terminal
        (False, False, False, False, False),  # a pipe, CI
        (True, False, True, False, False),  # --detach
        (True, False, False, True, False),  # --json: one object on stdout, never a live view
        (False, True, False, False, True),  # --wait follows even off a terminal
        (False, True, False, True, True),  # --wait --json: the ended job
    ],
)
def test_submit_follows_on_a_terminal_or_with_wait(
    monkeypatch, terminal, wait, detach, as_json, follows
) -> None:
    # Given whether stdout is a terminal
    monkeypatch.setattr(attach, "on_terminal", lambda: terminal)
    # When submit decides, Then it follows only as the options and the terminal say
    assert should_follow(wait=wait, detach=detach, as_json=as_json) is follows


def test_the_note_of_an_ended_duplicate_says_how_to_run_it_again() -> None:
    # Given an ended job's view
    view = {**running_view(), "status": "SUCCEEDED"}
    # When its note is written, Then it says when it ended and both ways to run the manifest again
    note = attach.ended_note(view, "job.yaml")
    assert "job tiny-1 already ran this manifest: it ended SUCCEEDED at 2026-12-01 12:00:30 UTC" in note
    assert "`spotrun submit job.yaml --idempotency-key NEW-KEY`, or change the manifest" in note


def test_wait_and_detach_together_are_refused_before_anything_is_sent(monkeypatch, tmp_path) -> None:
    # Given no API to talk to
    monkeypatch.setattr(target, "resolve_client", lambda _target: pytest.fail("a client was made"))
    file = tmp_path / "job.yaml"
    file.write_text("name: tiny\ntraining: {command: [python, train.py]}\n")
    # When both are given, Then it is a usage error (2), one JSON object under --json
    result = CliRunner().invoke(app, ["submit", str(file), "--wait", "--detach", "--json"])
    assert result.exit_code == 2
    assert "--detach" in json.loads(result.stdout)["error"]["message"]


class InterruptedClient:
    """A client whose poll is cut by Ctrl-C."""

    def get_job(self, job_id: str) -> dict[str, Any]:
        raise KeyboardInterrupt


def test_ctrl_c_under_json_answers_one_object_with_the_way_back(capsys) -> None:
    # Given a --json command following a job
    json_answer(True)
    try:
        # When Ctrl-C stops the poll
        with pytest.raises(attach.typer.Exit) as ended:
            attach.follow_or_detach(InterruptedClient(), "tiny-1", Console(stderr=True), 0.1)  # type: ignore[arg-type]
    finally:
        json_answer(False)
    # Then it exits 130, and stdout is one JSON object whose message says how to re-attach
    assert ended.value.exit_code == 130
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["exit_code"] == 130
    assert "spotrun attach tiny-1" in error["message"]


@pytest.mark.parametrize(
    "options",
    [["--detach"], ["--dry-run"], ["--json"], []],  # [] off a terminal: submit prints the id and returns
)
def test_poll_is_refused_where_submit_does_not_follow_the_job(monkeypatch, tmp_path, options) -> None:
    # Given no terminal and no API to talk to
    monkeypatch.setattr(attach, "on_terminal", lambda: False)
    monkeypatch.setattr(target, "resolve_client", lambda _target: pytest.fail("a client was made"))
    file = tmp_path / "job.yaml"
    file.write_text("name: tiny\ntraining: {command: [python, train.py]}\n")
    # When --poll is given to a submit that would not follow the job
    result = CliRunner().invoke(app, ["submit", str(file), "--poll", "0.5", *options])
    # Then it is a usage error (2) naming --wait, before anything is sent
    assert result.exit_code == 2
    assert "--wait" in result.output

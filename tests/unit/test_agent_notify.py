"""Notices sent through SSM: the train step's pid file, and delivery to it by a signal."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from spotrun.agent.step_runner import EXIT_REPORTED, forward_notice
from spotrun.agent.supervision.notice_relay import (
    NOTICE_SIGNAL,
    NOTICE_SOURCE,
    NoticeChannel,
    deliver_notice,
    process_start_time,
)
from spotrun.agent.supervision.spot_notices import Notice, NoticeWatcher
from spotrun.model import layout
from spotrun.model.agent_protocol.command import AgentCommand
from spotrun.model.manifest.parse import parse_manifest_document


@pytest.fixture(autouse=True)
def keep_the_notice_signal_handler() -> Iterator[None]:
    previous = signal.getsignal(NOTICE_SIGNAL)
    yield
    signal.signal(NOTICE_SIGNAL, previous)


def wait_for(condition, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return bool(condition())


def notice_command(job_id: str = "j-000000000001", attempt: int = 1) -> AgentCommand:
    manifest = {"name": "n", "training": {"command": ["true"]}, "outputs": {"model": "model"}}
    return AgentCommand(
        step="notice",
        job_id=job_id,
        attempt=attempt,
        region="us-east-1",
        jobs_bucket="jobs-bucket",
        manifest=parse_manifest_document(manifest),
        heartbeat_seconds=1,
        poll_seconds=1,
    )


def test_the_pid_file_names_this_process_while_the_channel_is_open(tmp_path):
    # Given a channel for job j-000000000001, attempt 2
    pid_file = layout.NvmeLayout(tmp_path, "j-000000000001").supervisor_pid_file(2)
    channel = NoticeChannel(pid_file, NoticeWatcher(None, 1), "j-000000000001", 2)

    # When it is open / Then its pid file says who to signal
    with channel:
        document = json.loads(pid_file.read_text())
        assert document == {
            "pid": os.getpid(),
            "start_time": process_start_time(os.getpid()),
            "job_id": "j-000000000001",
            "attempt": 2,
        }
        assert pid_file.parent == layout.NvmeLayout(tmp_path, "j-000000000001").runtime_dir

    # and once closed, it is gone
    assert not pid_file.exists()


def test_a_notice_reaches_the_watcher_once_and_a_later_one_changes_nothing(tmp_path, caplog):
    # Given a train step's channel
    caplog.set_level(logging.INFO)
    pid_file = tmp_path / "supervisor.pid"
    watcher = NoticeWatcher(None, 1)

    with NoticeChannel(pid_file, watcher, "j-000000000001", 1):
        # When a notice is delivered
        outcome = deliver_notice(pid_file)

        # Then the watcher holds an interruption from SSM
        assert outcome == ("delivered", os.getpid())
        assert wait_for(lambda: watcher.interruption() is not None)
        first = watcher.interruption()
        assert first == Notice("interruption", NOTICE_SOURCE)

        # When a second one comes
        deliver_notice(pid_file)

        # Then the first still stands, and the second was only logged
        assert wait_for(lambda: "already handling" in caplog.text)
        assert watcher.interruption() is first
    assert caplog.text.count("interruption notice:") == 1


def test_a_notice_after_an_imds_interruption_does_not_start_another(tmp_path, caplog):
    # Given a watcher that already has the IMDS notice
    caplog.set_level(logging.INFO)
    pid_file = tmp_path / "supervisor.pid"
    watcher = NoticeWatcher(None, 1)
    imds = Notice("interruption", "imds", "terminate")
    assert watcher.interrupt(imds) is True

    # When the SSM notice arrives
    with NoticeChannel(pid_file, watcher, "j-000000000001", 1):
        deliver_notice(pid_file)
        assert wait_for(lambda: "already handling" in caplog.text)

    # Then the IMDS notice stands
    assert watcher.interruption() is imds
    assert "already handling spot interruption: terminate (imds)" in caplog.text


def test_a_stale_pid_file_is_never_signalled(tmp_path):
    # Given pid files naming a process that ended, and this process with another start time
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    dead = tmp_path / "dead.pid"
    dead.write_text(json.dumps({"pid": ended.pid, "start_time": 1, "job_id": "j", "attempt": 1}))
    recycled = tmp_path / "recycled.pid"
    start = process_start_time(os.getpid())
    assert start is not None
    recycled.write_text(
        json.dumps({"pid": os.getpid(), "start_time": start + 1, "job_id": "j", "attempt": 1})
    )
    received: list[int] = []
    signal.signal(NOTICE_SIGNAL, lambda signum, frame: received.append(signum))
    (tmp_path / "garbled.pid").write_text("{")

    # When / Then
    assert deliver_notice(dead) == ("no_supervisor", None)
    assert deliver_notice(recycled) == ("no_supervisor", None)
    assert deliver_notice(tmp_path / "missing.pid") == ("no_supervisor", None)
    assert deliver_notice(tmp_path / "garbled.pid") == ("no_supervisor", None)
    time.sleep(0.05)
    assert received == []


def test_a_notice_command_for_a_job_not_training_here_is_a_logged_no_op(tmp_path, caplog):
    # Given an instance where job j-000000000001 trains attempt 1 only
    caplog.set_level(logging.INFO)
    watcher = NoticeWatcher(None, 1)
    pid_file = layout.NvmeLayout(tmp_path, "j-000000000001").supervisor_pid_file(1)

    with NoticeChannel(pid_file, watcher, "j-000000000001", 1):
        # When notices come for another attempt and another job
        other_attempt = forward_notice(notice_command("j-000000000001", 2), tmp_path)
        other_job = forward_notice(notice_command("j-000000000002", 1), tmp_path)

    # Then nothing was interrupted, and both exit 0
    assert (other_attempt, other_job) == (EXIT_REPORTED, EXIT_REPORTED)
    assert watcher.interruption() is None
    assert caplog.text.count("no train step of it runs on this instance") == 2


def test_a_notice_command_reaches_the_train_step_of_its_job_and_attempt(tmp_path):
    # Given job j-000000000001 training attempt 3 here
    watcher = NoticeWatcher(None, 1)
    pid_file = layout.NvmeLayout(tmp_path, "j-000000000001").supervisor_pid_file(3)

    # When its notice command runs
    with NoticeChannel(pid_file, watcher, "j-000000000001", 3):
        status = forward_notice(notice_command("j-000000000001", 3), tmp_path)
        assert wait_for(lambda: watcher.interruption() is not None)

    # Then
    assert status == EXIT_REPORTED
    interruption = watcher.interruption()
    assert interruption is not None
    assert interruption.describe() == f"interruption ({NOTICE_SOURCE})"

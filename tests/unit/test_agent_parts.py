"""Small parts of the agent: causes and log tails in their budgets, the child's share of a notice, the runtime copy."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

from spotrun.agent.reporter import cause_json
from spotrun.agent.steps.final_outputs import log_tail
from spotrun.agent.supervision.command_environment import install_runtime
from spotrun.agent.supervision.spot_notices import Notice, NoticeWatcher
from spotrun.agent.supervision.supervisor import interruption_grace
from spotrun.model.agent_protocol.command import FailureCause


def test_a_long_cause_is_shortened_from_the_front_of_its_log_tail():
    # Given a cause whose log tail alone passes Step Functions' limit
    tail = "\n".join(f"line {i}" for i in range(10_000)) + "\nthe last line"
    cause = FailureCause(message="failed", exit_code=1, log_tail=tail)

    # When
    text = cause_json(cause, limit=2000)

    # Then it fits, and keeps the end of the log
    assert len(text) <= 2000
    parsed = FailureCause.model_validate_json(text)
    assert parsed.log_tail is not None
    assert parsed.log_tail.endswith("the last line")
    assert parsed.exit_code == 1
    # and a huge message is cut too
    assert len(cause_json(FailureCause(message='"' * 50_000), limit=2000)) <= 2000


def test_log_tail_keeps_whole_last_lines_within_its_byte_budget(tmp_path):
    # Given a long log
    log = tmp_path / "attempt-001.log"
    log.write_text("".join(f"{i:05d} " + "x" * 200 + "\n" for i in range(500)))

    # When / Then
    tail = log_tail(log, max_lines=40, max_bytes=4096)
    lines = tail.splitlines()
    assert len(tail.encode()) <= 4096
    assert lines[-1].startswith("00499 ")
    assert all(len(line) == 206 for line in lines)  # no line cut in the middle
    assert log_tail(tmp_path / "missing.log") == ""


def test_the_child_gets_part_of_the_time_left_before_termination():
    # Given notices two minutes away, already past, and without a time
    soon = Notice("interruption", "imds", "terminate", datetime.now(UTC) + timedelta(seconds=120))
    past = Notice("interruption", "imds", "terminate", datetime.now(UTC) - timedelta(seconds=5))
    unknown = Notice("interruption", "agent received SIGTERM")

    # When / Then the rest of the window is left for the upload
    assert 70 < interruption_grace(soon) <= 72
    assert interruption_grace(past) == 1.0
    assert interruption_grace(unknown, default=42.0) == 42.0


def test_a_rebalance_recommendation_triggers_one_early_sync_and_an_interruption_stops_polling():
    # Given a notice source that recommends a rebalance twice, then announces an interruption
    notices = iter(
        [
            Notice("rebalance", "test"),
            Notice("rebalance", "test"),
            Notice("interruption", "test", "terminate"),
        ]
    )

    class Source:
        polls = 0

        def poll(self) -> Notice | None:
            Source.polls += 1
            return next(notices, None)

    seen: list[Notice] = []
    watcher = NoticeWatcher(Source(), 0.01, on_rebalance=seen.append)

    # When it polls for a while
    with watcher:
        deadline = time.monotonic() + 5
        while watcher.interruption() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)

    # Then the rebalance was acted on once, and polling ended with the interruption
    assert [n.kind for n in seen] == ["rebalance"]
    interruption = watcher.interruption()
    assert interruption is not None
    assert interruption.kind == "interruption"
    assert Source.polls == 3


def test_the_runtime_copy_alone_lets_a_bare_interpreter_import_the_training_helpers(tmp_path):
    # Given the runtime the agent puts on the training command's PYTHONPATH
    runtime = install_runtime(tmp_path / "runtime")

    # When an interpreter without site-packages (so without spotrun installed) imports the helpers from it
    result = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); "
            "from spotrun import training; print(training.Run.__name__)",
            str(runtime),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )

    # Then every module they need was copied
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Run"

"""The agent's notes keep lines of their own, and the failure's log tail keeps what the command said last."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from spotrun.agent.links import open_append
from spotrun.agent.secrets import MASK, Masker
from spotrun.agent.steps.final_outputs import log_tail
from spotrun.agent.supervision.log_notes import write_note
from spotrun.agent.supervision.supervisor import TrainingSupervisor


def test_a_note_after_output_without_a_newline_starts_a_line_of_its_own(tmp_path: Path) -> None:
    # Given a log whose last output has no newline, one whose output ends its line, and an empty one
    cut, whole, empty = tmp_path / "cut.log", tmp_path / "whole.log", tmp_path / "empty.log"
    cut.write_bytes(b"loss 0.5")
    whole.write_bytes(b"loss 0.5\n")

    # When the agent notes something in each
    for path in (cut, whole, empty):
        with open_append(path) as log:
            write_note(log, "the command ended: exit code 1")

    # Then every note is a line of its own, and no blank line is added
    note = b"--- spotrun: the command ended: exit code 1\n"
    assert cut.read_bytes() == b"loss 0.5\n" + note
    assert whole.read_bytes() == b"loss 0.5\n" + note
    assert empty.read_bytes() == note


def test_the_supervisors_end_note_is_not_glued_to_the_commands_last_output(tmp_path: Path) -> None:
    # Given a command whose last output has no newline
    log_path = tmp_path / "attempt-001.log"
    supervisor = TrainingSupervisor(
        [sys.executable, "-c", "import sys; sys.stdout.write('Error: out of memory'); sys.exit(3)"],
        tmp_path,
        {},
        log_path,
        restarts=0,
        max_runtime_seconds=30,
        checkpoint_signal=signal.SIGTERM,
    )

    # When it runs and fails
    supervisor.run()

    # Then the log keeps its last line apart from the agent's note, and so does the tail
    lines = log_path.read_text().splitlines()
    assert "Error: out of memory" in lines
    assert lines[-1] == "--- spotrun: the command ended: exit code 3"
    assert log_tail(log_path).splitlines()[-2:] == ["Error: out of memory", lines[-1]]


def test_a_last_line_longer_than_the_tail_keeps_its_end(tmp_path: Path) -> None:
    # Given a log whose last line (a traceback's message, say) is 10 KiB, then the agent's note
    log = tmp_path / "attempt-001.log"
    long_line = "RuntimeError: " + "x" * 10_000 + " the end"
    log.write_text("step 1\n" + long_line + "\n--- spotrun: the command ended: exit code 1\n")

    # When its 4 KiB tail is taken
    tail = log_tail(log, max_bytes=4096)

    # Then the tail holds that line's end, marked as cut, and the note, within the budget
    lines = tail.splitlines()
    assert lines[0].startswith("...")
    assert lines[0].endswith("x the end")
    assert lines[1] == "--- spotrun: the command ended: exit code 1"
    assert len(tail.encode()) <= 4096


def test_a_long_last_line_with_no_note_is_kept_too(tmp_path: Path) -> None:
    # Given a log that is one 8 KiB line
    log = tmp_path / "attempt-001.log"
    log.write_text("y" * 8192 + "\n")

    # When / Then its tail is the line's last bytes, not nothing
    tail = log_tail(log, max_bytes=4096)
    assert tail == "..." + "y" * (4096 - 1 - 3)


def test_a_secret_in_a_long_last_line_is_masked_whole(tmp_path: Path) -> None:
    # Given a secret of 3,000 characters that straddles the start of the last 4 KiB of a long last line
    secret = "S" + "k" * 2_998 + "E"
    log = tmp_path / "attempt-001.log"
    log.write_text("z" * 10_000 + secret + "w" * 2_500 + "\n")

    # When the tail is taken with the job's masker
    tail = log_tail(log, max_bytes=4096, masker=Masker([secret]))

    # Then the value is masked whole: not one run of its characters is left
    assert MASK in tail
    assert "kkkk" not in tail
    assert tail.endswith("w" * 2_500)

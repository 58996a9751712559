"""A hung training command is stopped: its steps stopped advancing for the bound, so it gets the checkpoint
signal, then SIGKILL once the grace is over, and the outcome says where it stopped."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from pathlib import Path

from spotrun.agent.supervision.hang import HangWatch
from spotrun.agent.supervision.supervisor import TrainingSupervisor

# Reports step 41 through its progress file, then waits as a rank stuck in a collective does. On SIGTERM it
# saves and exits as preempted, unless told to ignore the signal (a rank that cannot save).
STUCK = textwrap.dedent(
    """
    import signal, sys, time
    progress, ignore = sys.argv[1], sys.argv[2] == "ignore"
    def on_signal(signum, frame):
        open(progress + ".saved", "w").write("")
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore else on_signal)
    open(progress, "w").write("41\\n")
    time.sleep(600)
    """
)


def supervisor(tmp_path: Path, argv: list[str], watch: HangWatch, *, restarts: int = 0) -> TrainingSupervisor:
    return TrainingSupervisor(
        argv,
        tmp_path,
        dict(os.environ),
        tmp_path / "log.txt",
        restarts=restarts,
        max_runtime_seconds=60,
        checkpoint_signal=signal.SIGTERM,
        tick_seconds=0.02,
        stop_grace_seconds=0.5,
        hang=watch,
    )


def test_a_command_whose_steps_stop_is_stopped_with_the_checkpoint_signal(tmp_path):
    # Given a command stuck after step 41, watched with a bound of 0.3 s
    progress = tmp_path / "progress"
    watch = HangWatch(0.3, progress, limit="training.hang_minutes 0.005")
    argv = [sys.executable, "-c", STUCK, str(progress), "save"]

    # When it runs
    outcome = supervisor(tmp_path, argv, watch).run()

    # Then it was stopped as hung, after it saved on the checkpoint signal, and the outcome says where
    assert outcome.kind == "hung"
    assert outcome.exit_code == 128 + signal.SIGTERM
    assert Path(f"{progress}.saved").exists()
    assert outcome.message.startswith("steps stopped advancing at step 41 for ")
    assert outcome.message.endswith(" s (training.hang_minutes 0.005)")
    assert outcome.runs == 1
    assert "steps stopped advancing at step 41" in (tmp_path / "log.txt").read_text()


def test_a_hung_command_that_cannot_save_is_killed_after_the_grace(tmp_path):
    # Given a command stuck after step 41 that ignores the checkpoint signal
    progress = tmp_path / "progress"
    watch = HangWatch(0.3, progress)
    argv = [sys.executable, "-c", STUCK, str(progress), "ignore"]

    # When it runs
    outcome = supervisor(tmp_path, argv, watch).run()

    # Then it was killed once the grace was over
    assert outcome.kind == "hung"
    assert outcome.exit_code == -signal.SIGKILL
    assert "did not exit in time after the checkpoint signal" in (tmp_path / "log.txt").read_text()


# The first run reports step 41 and crashes at once (before any poll could see 41); the second sets up for
# longer than the bound (no step) and succeeds.
CRASH_THEN_SLOW_SETUP = textwrap.dedent(
    """
    import os, sys, time
    progress = sys.argv[1]
    if not os.path.exists(progress):
        open(progress, "w").write("41\\n")
        sys.exit(1)
    time.sleep(1.0)
    """
)


def test_a_restarted_command_setting_up_is_not_hung(tmp_path):
    # Given a command that reports a step, crashes, and is restarted into a setup longer than the bound
    progress = tmp_path / "progress"
    watch = HangWatch(0.3, progress)
    argv = [sys.executable, "-c", CRASH_THEN_SLOW_SETUP, str(progress)]

    # When it runs with one restart
    outcome = supervisor(tmp_path, argv, watch, restarts=1).run()

    # Then the second run completed: the first run's step 41 left in the file did not make it hung
    assert (outcome.kind, outcome.runs) == ("completed", 2)

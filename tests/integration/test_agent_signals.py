"""Where the agent's signals go: the checkpoint signal to the command's leader, SIGKILL to its whole group; and
a command that dies in the middle of its save is reported as such."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotrun.agent.step_runner import EXIT_REPORTED, execute, forward_notice
from spotrun.agent.supervision.notice_relay import NOTICE_SIGNAL
from spotrun.agent.supervision.spot_notices import Notice
from spotrun.agent.supervision.supervisor import TrainingSupervisor
from spotrun.model import layout
from tests.integration.test_agent import BUCKET, command, context, failure_of

# A leader with a helper process in its group (as a DataLoader worker is): on the checkpoint signal it writes
# whether the helper is still alive, then exits as preempted; a second helper ignores SIGTERM.
LEADER = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    report = sys.argv[1]
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    stubborn = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    open(report + ".pids", "w").write(f"{helper.pid} {stubborn.pid}")
    def on_signal(signum, frame):
        time.sleep(0.3)  # the save
        open(report, "w").write("helper alive" if helper.poll() is None else f"helper gone {helper.returncode}")
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_signal)
    open(report + ".ready", "w").write("")
    time.sleep(600)
    """
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (its parent gone, not yet reaped by init) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return True


def test_the_checkpoint_signal_reaches_the_leader_only_and_the_group_is_killed_after_it_exits(tmp_path):
    # Given a command whose helper processes share its process group
    report = tmp_path / "report"
    ready = Path(f"{report}.ready")
    notice = Notice("interruption", "test")
    supervisor = TrainingSupervisor(
        [sys.executable, "-c", LEADER, str(report)],
        tmp_path,
        dict(os.environ),
        tmp_path / "log.txt",
        restarts=0,
        max_runtime_seconds=120,
        checkpoint_signal=signal.SIGTERM,
        interruption=lambda: notice if ready.exists() else None,
    )

    # When an interruption notice comes once it runs
    outcome = supervisor.run()

    # Then its helper was still alive while it saved (the signal went to the leader only)
    assert outcome.kind == "interrupted"
    assert outcome.exit_code == 128 + signal.SIGTERM
    assert report.read_text() == "helper alive"
    # and nothing of its group outlives it, not even a process that ignores SIGTERM
    pids = [int(pid) for pid in Path(f"{report}.pids").read_text().split()]
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids)


# A script that crashes in the middle of its save on the checkpoint signal, as one did when the signal killed
# its DataLoader workers; its periodic checkpoints (every 50 steps, half a second) are fine.
CRASHING = textwrap.dedent(
    """
    import time
    from spotrun import training
    run = training.Run.from_env()
    step = 0
    def crash(directory):
        (directory / "half").write_text("x")
        raise RuntimeError("DataLoader worker (pid 4242) is killed by signal: Terminated.")
    while True:
        step += 1
        time.sleep(0.01)
        if run.stop_requested:
            run.save_checkpoint(step, crash)
        if run.checkpoint_due(step):
            run.save_checkpoint(step, lambda directory: (directory / "state").write_text(str(step)))
    """
)


@pytest.fixture
def keep_the_notice_signal_handler() -> Iterator[None]:
    previous = signal.getsignal(NOTICE_SIGNAL)
    yield
    signal.signal(NOTICE_SIGNAL, previous)


def test_a_command_that_crashes_in_its_save_on_the_notice_is_reported_as_a_failed_save(
    s3, tmp_path, keep_the_notice_signal_handler
):
    # Given the crashing script as a job's code, and a notice sent a few steps after its first checkpoint
    s3.put_object(Bucket=BUCKET, Key="crash/code/train.py", Body=CRASHING.encode())
    document = {
        "name": "crash",
        "training": {
            "code": f"s3://{BUCKET}/crash/code/",
            "command": [sys.executable, "train.py"],
            "checkpoint": {"interval_steps": 50, "keep_last": 2},
        },
        "outputs": {"model": "model"},
    }
    nvme = tmp_path / "nvme"
    execute(command("stage", document), context(s3, nvme))
    checkpoints = layout.NvmeLayout(nvme, "j-000000000001").checkpoint_dir

    def notify() -> None:
        deadline = time.monotonic() + 60
        while not layout.local_checkpoints(checkpoints) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # some 20 steps, reported (every 0.1 s at most) past the checkpoint
        forward_notice(command("notice", document), nvme)

    threading.Thread(target=notify, daemon=True).start()
    ctx = context(s3, nvme)

    # When the train step runs
    assert execute(command("train", document), ctx) == EXIT_REPORTED

    # Then the interruption names the crash in the save: how it ended, the step not saved, the error
    error, cause = failure_of(ctx)
    assert error == "Spot.Interrupted"
    assert cause.checkpoint_step is not None
    assert cause.last_step is not None
    assert cause.checkpoint_step < cause.last_step
    assert cause.save_failed == (
        f"exit code 1 after SIGTERM, step {cause.last_step} not saved: "
        "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Terminated."
    )

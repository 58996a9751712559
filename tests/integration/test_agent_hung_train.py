"""The train step with a hang bound: a command whose steps stop advancing is stopped with the checkpoint signal, its
checkpoint committed, and the step reports Training.Hung saying where it stalled and for how long."""

from __future__ import annotations

import sys
from typing import Any

from spotrun.agent.step_runner import EXIT_REPORTED, execute
from spotrun.model.agent_protocol.command import TRAINING_HUNG
from tests.integration.test_agent import command, context, failure_of

# Reports step 3, then waits as a rank stuck in a collective would, until the checkpoint signal: it then saves
# step 3 and exits for preemption (a stuck rank would not, and is killed after stop_grace_seconds).
STALLING = """
import time
from spotrun import training
run = training.Run.from_env()
run.report_step(3, force=True)
while not run.stop_requested:
    time.sleep(0.05)
run.save_checkpoint(3, lambda d: (d / "state.bin").write_bytes(b"3"))
run.exit_for_preemption()
"""


def stalling_manifest() -> dict[str, Any]:
    return {
        "name": "stalls",
        "training": {
            "command": [sys.executable, "-c", STALLING],
            "hang_minutes": 0.05,
            "checkpoint": {"interval_steps": 100, "keep_last": 2},
        },
    }


def test_a_command_whose_steps_stop_is_stopped_and_reported_hung(s3, tmp_path):
    # Given a command that reports step 3 and then makes no progress, under a 1 s hang bound (time-scaled), and
    # a 30 s runtime allowance (without the watch, that would stop it)
    ctx = context(s3, tmp_path / "nvme")
    train = command(
        "train", stalling_manifest(), hang_seconds=1.0, stop_grace_seconds=10.0, max_runtime_seconds=30.0
    )

    # When the train step runs
    assert execute(train, ctx) == EXIT_REPORTED

    # Then it reports Training.Hung: stalled at step 3, for the manifest's bound, with step 3's checkpoint
    error, cause = failure_of(ctx)
    assert error == TRAINING_HUNG
    assert cause.message.startswith("steps stopped advancing at step 3 for ")
    assert "(training.hang_minutes 0.05)" in cause.message
    assert "checkpoint step 3 committed" in cause.message
    assert (cause.last_step, cause.checkpoint_step, cause.save_failed) == (3, 3, None)


def test_without_a_bound_the_same_command_is_not_stopped_for_a_stall(s3, tmp_path):
    # Given the same command without hang_seconds, and a 2 s runtime allowance to end the test
    ctx = context(s3, tmp_path / "nvme")
    document = stalling_manifest()
    del document["training"]["hang_minutes"]
    train = command("train", document, max_runtime_seconds=2.0, stop_grace_seconds=10.0)

    # When the train step runs
    assert execute(train, ctx) == EXIT_REPORTED

    # Then only the runtime limit stopped it
    error, _ = failure_of(ctx)
    assert error == "Training.MaxRuntimeExceeded"

"""The manifest fields the agent enforces, proven by the agent really running a script.

``training.env``, ``checkpoint.interval_steps``, ``checkpoint.signal`` and ``outputs.model`` reach the training
command through its environment and the agent's own behaviour; each test here fails when the agent ignores
the field.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from spotrun.agent import checkpoint_store
from spotrun.agent.imds import ImdsClient
from spotrun.agent.step_runner import EXIT_REPORTED, execute
from spotrun.agent.supervision.spot_notices import ImdsNotices, NoticeWatcher
from spotrun.model import layout
from tests.integration.test_agent import (
    BUCKET,
    command,
    context,
    failure_of,
    manifest,
    object_bytes,
    success_of,
    upload_example,
)

# Writes what the command saw of the contract into the model file, at the path the environment names.
REPORT_ENVIRONMENT = """
import json, os, pathlib
names = ["DATASET", "OMP_NUM_THREADS", "SPOTRUN_MODEL"]
names += ["SPOTRUN_CHECKPOINT_INTERVAL_STEPS", "SPOTRUN_CHECKPOINT_SIGNAL"]
model = pathlib.Path(os.environ["SPOTRUN_OUTPUT_DIR"], os.environ["SPOTRUN_MODEL"])
model.parent.mkdir(parents=True, exist_ok=True)
model.write_text(json.dumps({name: os.environ.get(name) for name in names}))
"""

# Saves a checkpoint and exits only on SIGUSR2; any other signal (SIGTERM's default action) kills it unsaved.
CHECKPOINT_ON_SIGUSR2 = """
import pathlib, signal, time
from spotrun import training
run = training.Run.from_env(handle_signal=False)
signal.signal(signal.SIGUSR2, lambda signum, frame: run.request_stop())
(run.output_dir / "started").touch()
while not run.stop_requested:
    time.sleep(0.01)
run.save_checkpoint(5, lambda directory: (directory / "weights").write_text("5"))
run.exit_for_preemption()
"""


def _script_manifest(script: str, **training: Any) -> dict[str, Any]:
    return {
        "name": "fields",
        "training": {"command": [sys.executable, "-c", script], **training},
        "outputs": {"model": "model"},
    }


def test_the_command_gets_training_env_and_the_checkpoint_contract_from_the_manifest(s3, tmp_path):
    # Given a manifest with extra environment, its own checkpoint interval and signal, and a model path
    document = _script_manifest(
        REPORT_ENVIRONMENT,
        env={"DATASET": "imagenet-mini", "OMP_NUM_THREADS": 4},
        checkpoint={"interval_steps": 7, "signal": "SIGUSR2"},
    )
    document["outputs"] = {"model": "weights/seen.json"}
    ctx = context(s3, tmp_path / "nvme")

    # When the agent runs its train step
    status = execute(command("train", document), ctx)

    # Then the command saw each value, and the model was found and uploaded at the manifest's path
    result = success_of(ctx)
    assert status == EXIT_REPORTED
    assert result["model_key"] == "jobs/j-000000000001/output/weights/seen.json"
    assert json.loads(object_bytes(s3, result["model_key"])) == {
        "DATASET": "imagenet-mini",
        "OMP_NUM_THREADS": "4",
        "SPOTRUN_CHECKPOINT_INTERVAL_STEPS": "7",
        "SPOTRUN_CHECKPOINT_SIGNAL": "SIGUSR2",
        "SPOTRUN_MODEL": "weights/seen.json",
    }


def test_a_spot_notice_sends_the_manifests_checkpoint_signal(s3, tmp_path, imds):
    # Given a command that checkpoints only on SIGUSR2, and a manifest naming that signal
    document = _script_manifest(CHECKPOINT_ON_SIGUSR2, checkpoint={"signal": "SIGUSR2"})
    watcher = NoticeWatcher(ImdsNotices(ImdsClient(imds.endpoint)), 0.1)
    ctx = context(s3, tmp_path / "nvme", watcher)
    started = layout.NvmeLayout(tmp_path / "nvme", "j-000000000001").output_dir / "started"

    def announce_once_started() -> None:
        deadline = time.monotonic() + 20
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        imds.set_instance_action(seconds_from_now=5)

    threading.Thread(target=announce_once_started, daemon=True).start()

    # When the train step runs and the instance is told it will be reclaimed
    status = execute(command("train", document), ctx)

    # Then the command got that signal: it saved its checkpoint, which the agent committed and reported
    error, cause = failure_of(ctx)
    assert status == EXIT_REPORTED
    assert error == "Spot.Interrupted"
    assert cause.checkpoint_step == 5
    latest = checkpoint_store.latest_committed(s3, BUCKET, "j-000000000001")
    assert latest is not None
    assert latest.step == 5


def test_the_example_checkpoints_at_the_manifests_interval(s3, tmp_path, example_data):
    # Given the example staged with a checkpoint interval of 60 steps (the contract's default is 100)
    upload_example(s3, example_data)
    document = manifest(
        command=[sys.executable, "train.py", "--steps", "120"],
        checkpoint={"interval_steps": 60, "keep_last": 5},
    )
    assert execute(command("stage", document), context(s3, tmp_path / "nvme")) == EXIT_REPORTED
    ctx = context(s3, tmp_path / "nvme")

    # When the train step runs
    execute(command("train", document), ctx)

    # Then the script saved its checkpoints at the manifest's interval (it prints one line per save), and the
    # last one was committed
    result = success_of(ctx)
    log = object_bytes(s3, result["log_key"]).decode()
    saved = [line.split()[1] for line in log.splitlines() if line.startswith("step ")]
    assert saved == ["60", "120"]
    assert result["last_checkpoint_step"] == 120

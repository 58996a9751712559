"""The train step expands ${NAME} in the command's argv when it starts it, and logs the argv as written."""

from __future__ import annotations

import dataclasses
import sys

from spotrun.agent.step_runner import EXIT_REPORTED, execute
from spotrun.model import layout
from tests.integration.test_agent import command, context, object_bytes, success_of

SECRET = "hunter2-not-for-the-log"
# Writes its arguments as the model: what the agent started it with.
WRITE_ARGV = (
    "import os, sys; "
    "open(os.path.join(os.environ['SPOTRUN_OUTPUT_DIR'], 'model'), 'w').write(' '.join(sys.argv[1:]))"
)


def test_the_command_runs_with_the_gpu_count_and_env_values_in_its_argv(s3, tmp_path):
    # Given a command naming ${SPOTRUN_GPUS_PER_NODE} and a training.env value, on an instance with 4 GPUs
    document = {
        "name": "argv",
        "training": {
            "command": [
                sys.executable,
                "-c",
                WRITE_ARGV,
                "--nproc-per-node",
                "${SPOTRUN_GPUS_PER_NODE}",
                "${TOKEN}",
            ],
            "env": {"TOKEN": SECRET},
        },
        "outputs": {"model": "model"},
    }
    ctx = dataclasses.replace(context(s3, tmp_path / "nvme"), gpus_per_node=lambda: 4)

    # When the train step runs it
    status = execute(command("train", document), ctx)

    # Then the command got the values, and the job's log shows the command as written, without the value
    assert status == EXIT_REPORTED
    result = success_of(ctx)
    assert object_bytes(s3, result["model_key"]).decode() == f"--nproc-per-node 4 {SECRET}"
    log = layout.NvmeLayout(tmp_path / "nvme", "j-000000000001").log_file(1).read_text()
    assert "${SPOTRUN_GPUS_PER_NODE}" in log
    assert SECRET not in log

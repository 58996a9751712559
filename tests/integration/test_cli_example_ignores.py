"""An example run directly writes ./checkpoints and ./output (and tiny-regression ./data) into its own directory;
the code archive that `spotrun submit --workdir` uploads from that directory leaves them out (each example's
.spotrunignore), and keeps the code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from spotrun.cli.workdir.pack import packed
from spotrun.shape import REPO_ROOT

EXAMPLES = sorted(path.parent.name for path in (REPO_ROOT / "examples").glob("*/manifest.yaml"))
LEFT_OUT = ("checkpoints", "output")

# What every example's script does through the checkpoint contract when run with no SPOTRUN_* variables: a
# checkpoint in ./checkpoints, the model in ./output (the framework examples train for minutes on 2 cores; the
# directories they write are the contract's, written here by the same calls).
_CONTRACT_RUN = """
from spotrun import training

run = training.Run.from_env(model_name="model.bin")
run.save_checkpoint(20, lambda directory: (directory / "state.bin").write_bytes(b"state"))
run.save_model(lambda path: path.write_bytes(b"weights"))
"""


def run_directly(directory: Path) -> None:
    """Run the example in ``directory`` as its README says, without spotrun."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTRUN_")}
    env["PYTHONPATH"] = str(REPO_ROOT)

    def python(*argv: str) -> None:
        subprocess.run(
            [sys.executable, *argv], cwd=directory, env=env, check=True, capture_output=True, timeout=120
        )

    if directory.name == "tiny-regression":  # NumPy, seconds: the real script
        python("generate_data.py", "data")
        python("train.py", "--steps", "60")
    else:
        python("-c", _CONTRACT_RUN)


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_workdir_upload_of_an_example_that_ran_directly_leaves_its_checkpoints_and_output_out(
    tmp_path: Path, example: str
) -> None:
    # Given a copy of the example, run directly in its own directory
    directory = tmp_path / example
    shutil.copytree(REPO_ROOT / "examples" / example, directory)
    run_directly(directory)
    assert all(any((directory / name).iterdir()) for name in LEFT_OUT), "the run wrote nothing to leave out"
    # When the directory is packed as `spotrun submit --workdir` packs it for upload
    with packed(directory) as archive, tarfile.open(archive.path) as tar:
        names = set(tar.getnames())
    # Then the archive holds the code and the manifest, and nothing the run wrote
    carried = sorted(name for name in names if name.split("/")[0] in (*LEFT_OUT, "data"))
    assert carried == [], carried
    assert {"train.py", "manifest.yaml"} <= names

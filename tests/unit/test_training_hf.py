"""spotrun.training_hf without transformers: the agent's copy imports anywhere, and what it refuses."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spotrun import training_hf
from spotrun.agent.environment import install_runtime


def test_the_runtime_copy_imports_without_transformers_and_needs_it_only_for_the_callback(tmp_path):
    # Given the runtime the agent puts on the training command's PYTHONPATH
    runtime = install_runtime(tmp_path / "runtime")

    # When an interpreter without site-packages (no spotrun, no transformers) imports the helper, then asks
    # for the callback
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from spotrun import training_hf\n"
        "print('imported')\n"
        "try:\n"
        "    training_hf.SpotrunCallback\n"
        "except ModuleNotFoundError as error:\n"
        "    print('needs', error.name)\n"
    )
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", script, str(runtime)], capture_output=True, text=True, timeout=60
    )

    # Then the module was copied and imports, and transformers is imported only when the callback is needed
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["imported", "needs transformers"]


def test_train_refuses_a_resume_checkpoint_of_its_own():
    # Given / When train() is asked to resume from a checkpoint the caller chose
    # Then it refuses: the run's latest committed checkpoint is the one to resume from
    with pytest.raises(ValueError, match="resumes from the run's latest checkpoint"):
        training_hf.train(object(), object(), resume_from_checkpoint="elsewhere")  # type: ignore[arg-type]

"""spotrun.training.huggingface without transformers: the agent's copy imports anywhere, and what it refuses."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from spotrun.agent.supervision.command_environment import install_runtime
from spotrun.training import huggingface


def test_the_runtime_copy_imports_without_transformers_and_needs_it_only_for_the_callback(tmp_path):
    # Given the runtime the agent puts on the training command's PYTHONPATH
    runtime = install_runtime(tmp_path / "runtime")

    # When an interpreter without site-packages (no spotrun, no transformers) imports the helper, then asks
    # for the callback
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from spotrun.training import huggingface\n"
        "print('imported')\n"
        "try:\n"
        "    huggingface.SpotrunCallback\n"
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
        huggingface.train(object(), object(), resume_from_checkpoint="elsewhere")  # type: ignore[arg-type]


ARGUMENTS = {"world_size": 1, "load_best_model_at_end": False, "save_only_model": False}


@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("world_size", 2, "one training process, not 2"),
        ("load_best_model_at_end", True, "load_best_model_at_end is not supported"),
        ("save_only_model", True, "save_only_model leaves the optimizer"),
    ],
)
def test_arguments_under_which_a_checkpoint_would_not_resume_exactly_are_refused(argument, value, message):
    # Given Trainer arguments that are fine but for one
    args = SimpleNamespace(**{**ARGUMENTS, argument: value})

    # When / Then the callback's check refuses that one, by name
    with pytest.raises(ValueError, match=message):
        huggingface.check_arguments(args)


def test_arguments_the_contract_can_resume_from_pass_the_check():
    # Given / When / Then
    huggingface.check_arguments(SimpleNamespace(**ARGUMENTS))

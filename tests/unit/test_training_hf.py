"""spotrun.training.huggingface without transformers: the agent's copy imports anywhere, and what it refuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from spotrun import training
from spotrun.agent.supervision.command_environment import install_runtime
from spotrun.model import layout
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


ARGUMENTS = {
    "world_size": 2,
    "load_best_model_at_end": False,
    "save_only_model": False,
    "save_on_each_node": False,
    "fsdp": "",
    "deepspeed": None,
}


@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("load_best_model_at_end", True, "load_best_model_at_end is not supported"),
        ("save_only_model", True, "save_only_model leaves the optimizer"),
        ("save_on_each_node", True, "save_on_each_node is not supported"),
        ("fsdp", "full_shard", "fsdp is not supported"),
        ("deepspeed", "ds_config.json", "deepspeed is not supported"),
    ],
)
def test_arguments_under_which_a_checkpoint_would_not_resume_exactly_are_refused(argument, value, message):
    # Given Trainer arguments that are fine but for one
    args = SimpleNamespace(**{**ARGUMENTS, argument: value})

    # When / Then the callback's check refuses that one, by name
    with pytest.raises(ValueError, match=message):
        huggingface.check_arguments(args)


@pytest.mark.parametrize("world_size", [1, 2, 8])
def test_arguments_the_contract_can_resume_from_pass_the_check(world_size):
    # Given / When / Then one process or several (torchrun) pass
    huggingface.check_arguments(SimpleNamespace(**{**ARGUMENTS, "world_size": world_size}))


def checkpoint_of(root: Path, step: int, *files: str) -> training.Run:
    run = training.Run(root / "data", root, root / "checkpoints", root / "output")
    directory = run.checkpoint_dir / layout.checkpoint_name(step)
    directory.mkdir(parents=True)
    for name in files:
        (directory / name).write_bytes(b"")
    return run


@pytest.mark.parametrize(
    ("files", "world_size"),
    [(("rng_state.pth",), 1), (("rng_state_0.pth", "rng_state_1.pth"), 2)],
)
def test_the_latest_checkpoint_is_resumed_by_as_many_processes_as_saved_it(tmp_path, files, world_size):
    # Given a checkpoint of step 8 saved by this many processes (one generators' file each)
    run = checkpoint_of(tmp_path, 8, "trainer_state.json", *files)

    # When / Then it is the one to resume from
    assert huggingface.resume_checkpoint(run, world_size) == run.checkpoint_dir / layout.checkpoint_name(8)


@pytest.mark.parametrize(
    ("files", "world_size", "message"),
    [
        (("rng_state_0.pth", "rng_state_1.pth"), 1, "written by 2 training process"),
        (("rng_state.pth",), 2, "written by 1 training process"),
        (("rng_state_0.pth",), 2, "written by 1 training process"),
    ],
)
def test_a_checkpoint_saved_by_another_number_of_processes_is_refused(tmp_path, files, world_size, message):
    # Given a checkpoint whose generators' files are another number of processes' than this run has
    run = checkpoint_of(tmp_path, 8, "trainer_state.json", *files)

    # When / Then resuming from it is refused (Trainer would resume, only logging that it skips the generators)
    with pytest.raises(RuntimeError, match=f"{message}.*this run has {world_size}"):
        huggingface.resume_checkpoint(run, world_size)


def test_a_step_holding_only_a_nodes_part_is_not_resumed_from(tmp_path):
    # Given a whole checkpoint of step 8 and, of step 12, only the generators of this node's rank
    run = checkpoint_of(tmp_path, 8, "trainer_state.json", "rng_state_0.pth", "rng_state_1.pth")
    (run.checkpoint_dir / layout.checkpoint_name(12)).mkdir()
    (run.checkpoint_dir / layout.checkpoint_name(12) / "rng_state_1.pth").write_bytes(b"")

    # When / Then the run resumes from step 8, the newest whole one
    assert huggingface.resume_checkpoint(run, 2) == run.checkpoint_dir / layout.checkpoint_name(8)


def test_a_fresh_start_resumes_from_nothing(tmp_path):
    # Given / When / Then
    run = training.Run(tmp_path / "data", tmp_path, tmp_path / "checkpoints", tmp_path / "output")
    assert huggingface.resume_checkpoint(run, 2) is None


class RecordingModel:
    """Stands for the DistributedDataParallel model accelerate builds: records the hooks registered on it."""

    def __init__(self) -> None:
        self.hooks: list[tuple[object, object]] = []

    def register_comm_hook(self, state: object, hook: object) -> None:
        self.hooks.append((state, hook))


def test_the_rank_ordered_sum_replaces_the_trainers_ddp_handler_keeping_its_arguments():
    # Given a trainer whose accelerator has a DDP handler with an argument of its own
    accelerate_utils = pytest.importorskip("accelerate.utils")
    from spotrun.training import pytorch_ddp

    handler = accelerate_utils.DistributedDataParallelKwargs(find_unused_parameters=True)
    trainer = SimpleNamespace(accelerator=SimpleNamespace(ddp_handler=handler))

    # When the rank-ordered sum is asked for (twice: the second changes nothing), and accelerate then wraps a model
    huggingface.sum_gradients_in_rank_order(trainer)
    huggingface.sum_gradients_in_rank_order(trainer)
    model = RecordingModel()
    trainer.accelerator.ddp_handler.register_comm_hook(model)

    # Then DDP gets pytorch_ddp's rank-ordered hook, once, and keeps the trainer's DDP arguments
    assert model.hooks == [(None, pytorch_ddp._ordered_mean)]
    assert trainer.accelerator.ddp_handler.to_kwargs() == {"find_unused_parameters": True}


def test_a_ddp_communication_hook_of_the_trainers_own_is_refused_beside_the_rank_ordered_sum():
    # Given a trainer whose DDP arguments ask for fp16 compression of the gradients
    accelerate_utils = pytest.importorskip("accelerate.utils")
    handler = accelerate_utils.DistributedDataParallelKwargs(
        comm_hook=accelerate_utils.DDPCommunicationHookType.FP16
    )
    trainer = SimpleNamespace(accelerator=SimpleNamespace(ddp_handler=handler))

    # When / Then the rank-ordered sum, which would replace it, is refused
    with pytest.raises(ValueError, match="would replace the rank-ordered gradient sum"):
        huggingface.sum_gradients_in_rank_order(trainer)

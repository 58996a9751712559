"""The contract around the PyTorch helpers: ${NAME} in the command's argv, and SPOTRUN_GPUS_PER_NODE."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spotrun import training
from spotrun.agent.imds import ImdsError
from spotrun.agent.supervision.command_environment import child_environment, install_runtime
from spotrun.agent.supervision.gpu import count_gpus, list_nvidia_gpus
from spotrun.model import layout
from spotrun.model.agent_protocol.command import AgentCommand, NodeGroup
from spotrun.model.contract_variables import CONTRACT_VARIABLES, ENV_GPUS_PER_NODE, expand_argv
from spotrun.model.manifest.parse import parse_manifest_document
from tests.unit.test_agent_gpu import fake_nvidia_smi


def manifest(command: list[str], env: dict[str, str] | None = None) -> dict:
    return {"name": "n", "training": {"command": command, "env": env or {}}}


def agent_command(document: dict, group: NodeGroup | None = None) -> AgentCommand:
    """The train step's command of the job ``document`` describes (one node of ``group``, if given)."""
    return AgentCommand(
        step="train",
        job_id="j-000000000001",
        attempt=2,
        region="us-east-1",
        jobs_bucket="jobs-bucket",
        manifest=parse_manifest_document(document),
        heartbeat_seconds=1,
        poll_seconds=1,
        group=group,
    )


class FakeImds:
    def __init__(self, instance_type: str | None):
        self.type = instance_type

    def instance_type(self) -> str:
        if self.type is None:
            raise ImdsError("IMDS GET /latest/meta-data/instance-type: unreachable")
        return self.type


# -- ${NAME} in the argv --------------------------------------------------------------------------------


def test_contract_variables_and_training_env_names_are_expanded_in_the_argv():
    # Given a command naming the GPU count and a training.env variable, and a bare $ of a regular expression
    argv = ["torchrun", "--nproc-per-node", "${SPOTRUN_GPUS_PER_NODE}", "train.py", "--tag=${RUN}-x", "^a$"]
    # When it is expanded in the command's environment
    expanded = expand_argv(argv, {"SPOTRUN_GPUS_PER_NODE": "4", "RUN": "blue"})
    # Then each ${NAME} is its value and the rest is as written
    assert expanded == ["torchrun", "--nproc-per-node", "4", "train.py", "--tag=blue-x", "^a$"]


def test_a_manifest_may_name_contract_variables_and_its_own_env_in_the_command():
    # Given a command with ${SPOTRUN_GPUS_PER_NODE} and ${RUN}, which training.env defines
    document = manifest(["torchrun", "--nproc-per-node", "${SPOTRUN_GPUS_PER_NODE}", "${RUN}"], {"RUN": "1"})
    # When it is validated, then it is accepted as written (the agent expands it)
    parsed = parse_manifest_document(document)
    assert parsed.training.command[2] == "${SPOTRUN_GPUS_PER_NODE}"


@pytest.mark.parametrize("reference", ["${HOME}", "${SPOTRUN_NOT_SET}", "${not a name}", "--x=${}"])
def test_a_command_naming_anything_else_is_refused_with_the_name(reference):
    # Given a command naming a variable that is neither in the contract nor in training.env
    document = manifest(["python", "train.py", reference], {"RUN": "1"})
    # When it is validated, then it is refused, the message naming it and what is allowed
    with pytest.raises(ValueError, match="names neither a SPOTRUN_ variable") as refused:
        parse_manifest_document(document)
    assert reference[reference.index("${") :] in str(refused.value)
    assert "SPOTRUN_GPUS_PER_NODE" in str(refused.value)


# -- SPOTRUN_GPUS_PER_NODE ------------------------------------------------------------------------------


def test_the_driver_count_wins_over_the_instance_type():
    # Given nvidia-smi listing 2 GPUs on an instance whose type has 4
    # When the GPUs are counted, then the driver's count is used
    assert count_gpus(FakeImds("g5.12xlarge"), lister=lambda: 2) == 2


@pytest.mark.parametrize(
    ("instance_type", "expected"), [("g5.12xlarge", 4), ("p4d.24xlarge", 8), ("m5.large", 0), (None, 0)]
)
def test_without_nvidia_smi_the_instance_types_gpus_are_used(instance_type, expected):
    # Given no nvidia-smi, and IMDS naming an instance type (or unreachable: not on EC2)
    # When the GPUs are counted, then the catalog's count for the type is used; 0 when unknown
    assert count_gpus(FakeImds(instance_type), lister=lambda: None) == expected


def test_nvidia_smi_list_gpus_lines_are_counted(tmp_path, monkeypatch):
    # Given an nvidia-smi that lists three GPUs
    script = fake_nvidia_smi(
        tmp_path / "bin",
        '[ "$1" = --list-gpus ] || exit 9\n'
        'for i in 0 1 2; do echo "GPU $i: NVIDIA A10G (UUID: GPU-$i)"; done',
    )
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    # When they are listed, then there are three
    assert list_nvidia_gpus() == 3


def test_the_command_gets_the_gpu_count_and_every_contract_variable(tmp_path):
    # Given a train command on an instance with 4 GPUs
    command = agent_command(manifest(["python", "train.py"]))
    # When its environment is built
    env = child_environment(command, layout.NvmeLayout(tmp_path, command.job_id), {}, gpus_per_node=4)
    # Then it says 4, and it sets exactly the variables the manifest's ${SPOTRUN_...} may name
    assert env[ENV_GPUS_PER_NODE] == "4"
    assert {name for name in env if name.startswith("SPOTRUN_")} == CONTRACT_VARIABLES


def test_the_run_reads_the_gpu_count(tmp_path):
    # Given the contract's environment with 8 GPUs, and none at all (run on its own)
    def run(environ: dict[str, str]) -> training.Run:
        return training.Run.from_env(
            environ, checkpoint_dir=tmp_path, output_dir=tmp_path, handle_signal=False
        )

    # When the run is built, then it has the count, or None
    assert run({ENV_GPUS_PER_NODE: "8"}).gpus_per_node == 8
    assert run({}).gpus_per_node is None


def test_a_bare_interpreter_imports_the_torch_helpers_from_the_runtime_copy(tmp_path):
    # Given the runtime the agent puts on the training command's PYTHONPATH
    runtime = install_runtime(tmp_path / "runtime")

    # When an interpreter without site-packages (no spotrun, no torch) imports the PyTorch helpers from it
    result = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); "
            "from spotrun.training import pytorch; print(pytorch.TorchCheckpointer.__name__)",
            str(runtime),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )

    # Then they were copied with what they import, and torch is not needed until a function runs
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "TorchCheckpointer"


def test_a_setup_command_naming_anything_else_is_refused_with_its_position():
    # Given a setup command naming ${HOME}, which neither the contract nor training.env defines
    document = manifest(["python", "train.py"], {"RUN": "1"})
    document["training"]["setup"] = [
        ["pip", "install", "-r", "${SPOTRUN_CODE_DIR}/r.txt"],
        ["echo", "${HOME}"],
    ]
    # When it is validated, then it is refused, naming the command's position and the name
    with pytest.raises(ValueError, match=r"setup\[1\]: \$\{HOME\} names neither a SPOTRUN_ variable"):
        parse_manifest_document(document)

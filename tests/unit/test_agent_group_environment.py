"""A multi-node job's command environment: torchrun's PET_ variables, and the node's place in the contract."""

from __future__ import annotations

import pytest
from torch.distributed.run import get_args_parser

from spotrun.agent.supervision.command_environment import child_environment, torchrun_environment
from spotrun.model import layout
from spotrun.model.agent_protocol.command import AgentCommand, NodeGroup
from spotrun.model.contract_variables import ENV_NODE_RANK, ENV_NODES
from tests.unit.test_training_torch_contract import agent_command as train_command


def group(node: int, nodes: int = 3) -> NodeGroup:
    return NodeGroup(
        nodes=nodes, node=node, rendezvous_host="10.0.1.7", rendezvous_port=29400, rendezvous_id="j-1-a2"
    )


def agent_command(node_group: NodeGroup | None, restarts: int = 2) -> AgentCommand:
    document = {
        "name": "n",
        "resources": {"nodes": node_group.nodes if node_group else 1},
        "training": {"command": ["torchrun", "train.py"], "restarts_on_error": restarts},
    }
    return train_command(document, node_group)


def test_node_0_hosts_the_rendezvous_at_its_own_address():
    # Given node 0 of a 3-node group
    # When its torchrun environment is made without an address of its own
    env = torchrun_environment(group(0), max_restarts=2, local_addr=None)

    # Then it joins 3 nodes through c10d at node 0's endpoint, hosts the store, and ranks itself by its address
    assert env == {
        "PET_NNODES": "3",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "10.0.1.7:29400",
        "PET_RDZV_ID": "j-1-a2",
        "PET_RDZV_CONF": "is_host=true",
        "PET_LOCAL_ADDR": "10.0.1.7",
        "PET_MAX_RESTARTS": "2",
    }


def test_another_node_joins_with_its_own_address_and_hosts_nothing():
    # Given node 2, whose private address is 10.0.1.9
    # When its torchrun environment is made
    env = torchrun_environment(group(2), max_restarts=0, local_addr="10.0.1.9")

    # Then it names its own address and does not host the store
    assert env["PET_LOCAL_ADDR"] == "10.0.1.9"
    assert env["PET_RDZV_CONF"] == "is_host=false"
    assert env["PET_RDZV_ENDPOINT"] == "10.0.1.7:29400"


def test_another_node_without_its_address_is_refused():
    # Given node 1, whose address could not be read
    # When / Then the environment is refused: torch would rank it by its host name
    with pytest.raises(ValueError, match="node 1 of the group needs its private IPv4"):
        torchrun_environment(group(1), max_restarts=0, local_addr=None)


def test_torchrun_reads_every_option_from_the_environment(monkeypatch):
    # Given node 1's environment
    for name, value in torchrun_environment(group(1), max_restarts=4, local_addr="10.0.1.8").items():
        monkeypatch.setenv(name, value)

    # When torchrun's own parser reads a command line that names only the script
    args = get_args_parser().parse_args(["train.py"])

    # Then it has the group's options
    assert (args.nnodes, args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id) == (
        "3",
        "c10d",
        "10.0.1.7:29400",
        "j-1-a2",
    )
    assert (args.rdzv_conf, args.local_addr, int(args.max_restarts)) == ("is_host=false", "10.0.1.8", 4)


def test_a_group_command_gets_the_node_its_address_and_torch_elastics_restarts(tmp_path):
    # Given node 1 of 3, with training.restarts_on_error 2
    command = agent_command(group(1), restarts=2)

    # When its command's environment is made
    env = child_environment(command, layout.NvmeLayout(tmp_path, command.job_id), {}, local_addr="10.0.1.8")

    # Then the contract says node 1 of 3, and torchrun restarts twice
    assert (env[ENV_NODE_RANK], env[ENV_NODES]) == ("1", "3")
    assert env["PET_LOCAL_ADDR"] == "10.0.1.8"
    assert env["PET_MAX_RESTARTS"] == "2"


def test_the_groups_values_win_over_training_env(tmp_path):
    # Given a training.env that names the rendezvous itself
    command = agent_command(group(0))
    manifest = command.manifest.model_copy(
        update={
            "training": command.manifest.training.model_copy(update={"env": {"PET_RDZV_ENDPOINT": "x:1"}})
        }
    )
    command = command.model_copy(update={"manifest": manifest})

    # When the environment is made, then the group's endpoint is the one torchrun reads
    env = child_environment(command, layout.NvmeLayout(tmp_path, command.job_id), {})
    assert env["PET_RDZV_ENDPOINT"] == "10.0.1.7:29400"


def test_a_one_node_job_is_node_0_of_1_without_torchrun_variables(tmp_path):
    # Given a one-node job
    command = agent_command(None)

    # When its environment is made
    env = child_environment(command, layout.NvmeLayout(tmp_path, command.job_id), {})

    # Then it is node 0 of 1, and torchrun gets nothing from spotrun
    assert (env[ENV_NODE_RANK], env[ENV_NODES]) == ("0", "1")
    assert not [name for name in env if name.startswith("PET_")]


def efa_command(env: dict[str, str] | None = None) -> AgentCommand:
    command = agent_command(group(0).model_copy(update={"efa": True}))
    training = command.manifest.training.model_copy(update={"env": env or {}})
    return command.model_copy(update={"manifest": command.manifest.model_copy(update={"training": training})})


def test_a_group_with_an_efa_gets_the_libfabric_environment_of_its_type(tmp_path):
    # Given node 0 of a group launched with EFAs on p4d.24xlarge, whose training.env lowers NCCL's logging
    command = efa_command({"NCCL_DEBUG": "WARN"})

    # When its environment is made
    env = child_environment(
        command, layout.NvmeLayout(tmp_path, command.job_id), {}, instance_type="p4d.24xlarge"
    )

    # Then NCCL goes over libfabric's EFA provider with GPUDirect RDMA, and training.env has the last word
    assert env["FI_PROVIDER"] == "efa"
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert env["RDMAV_FORK_SAFE"] == "1"
    assert env["NCCL_DEBUG"] == "WARN"


def test_a_group_without_an_efa_gets_no_libfabric_environment(tmp_path):
    # Given node 0 of a group without EFAs
    command = agent_command(group(0))

    # When its environment is made, then libfabric is not told to use an EFA it does not have
    env = child_environment(
        command, layout.NvmeLayout(tmp_path, command.job_id), {}, instance_type="g5.xlarge"
    )
    assert "FI_PROVIDER" not in env


def test_a_group_with_an_efa_needs_the_instance_type(tmp_path):
    # Given node 0 of a group with EFAs, whose instance type is unknown
    command = efa_command()

    # When / Then its environment is refused
    with pytest.raises(ValueError, match="needs the node's instance type"):
        child_environment(command, layout.NvmeLayout(tmp_path, command.job_id), {})

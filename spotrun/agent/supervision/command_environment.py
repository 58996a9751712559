"""The training command's environment: the checkpoint contract, ``spotrun.training`` on its path, and for a
multi-node job the ``PET_`` variables that make ``torchrun`` join its group."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from spotrun import training
from spotrun.agent.links import replace_file
from spotrun.agent.supervision.telemetry import metrics_file
from spotrun.model import layout
from spotrun.model.agent_protocol.command import AgentCommand, NodeGroup
from spotrun.model.capacity.group_launch import efa_environment
from spotrun.model.contract_variables import ENV_NODE_RANK, ENV_NODES

# The training package is copied whole, with the two model modules it imports (each stdlib-only, as the
# "training helpers" import contract keeps them), so that any interpreter finds them. The framework helpers
# (pytorch*, huggingface) import their frameworks lazily: only a script that uses one needs it installed.
_RUNTIME_MODEL_MODULES = ("model/__init__.py", "model/layout.py", "model/contract_variables.py")
_RUNTIME_INIT = '"""spotrun\'s checkpoint contract, as seen by a training script (copied by the agent)."""\n'


def install_runtime(runtime_dir: Path) -> Path:
    """Copy the ``spotrun.training`` package (and the two model modules it imports) into ``runtime_dir/spotrun``.

    The training command often runs another interpreter than the agent (a conda env of the Deep Learning AMI,
    say), where spotrun is not installed. Putting only these stdlib-only modules on its ``PYTHONPATH`` lets
    ``from spotrun import training`` work there without exposing the agent's own dependencies.

    Parameters
    ----------
    runtime_dir
        The directory to put on ``PYTHONPATH``.

    Returns
    -------
    Path
        ``runtime_dir``.

    Raises
    ------
    LinkError
        When a directory below ``runtime_dir`` is a symbolic link.
    """
    package = runtime_dir / "spotrun"
    training_dir = Path(training.__file__).parent
    source = training_dir.parent
    # The training command can write runtime_dir: each file is replaced, never written through a link it left.
    replace_file(runtime_dir, package / "__init__.py", _RUNTIME_INIT.encode())
    for module in sorted(training_dir.glob("*.py")):
        replace_file(runtime_dir, package / "training" / module.name, module.read_bytes())
    for name in _RUNTIME_MODEL_MODULES:
        replace_file(runtime_dir, package / name, (source / name).read_bytes())
    return runtime_dir


def child_environment(
    command: AgentCommand,
    job_layout: layout.NvmeLayout,
    base_env: Mapping[str, str],
    gpus_per_node: int = 0,
    secrets: Mapping[str, str] | None = None,
    local_addr: str | None = None,
    instance_type: str | None = None,
) -> dict[str, str]:
    """The environment of the training command.

    Parameters
    ----------
    command
        The train command.
    job_layout
        The job's NVMe directories.
    base_env
        Inherited variables (the agent's environment).
    gpus_per_node
        The instance's GPUs (:func:`spotrun.agent.supervision.gpu.count_gpus`), as ``SPOTRUN_GPUS_PER_NODE``.
    secrets
        The values of ``training.secrets`` (:func:`spotrun.agent.secrets.resolve_secrets`), by name.
    local_addr
        This node's private IPv4 address (IMDS ``local-ipv4``): needed by a node other than node 0 of a group
        (node 0's is the rendezvous host); ignored without a group.
    instance_type
        This node's instance type (IMDS ``instance-type``): needed by a group with an EFA, whose libfabric and
        NCCL variables depend on it (:func:`spotrun.model.capacity.group_launch.efa_environment`).

    Returns
    -------
    dict[str, str]
        ``base_env``, then a group's EFA variables (which ``training.env`` may override: ``NCCL_DEBUG``, say),
        the manifest's ``training.env`` and the secrets' values, then the ``SPOTRUN_*`` contract and, for a
        group, :func:`torchrun_environment` (which win), with the runtime directory first on ``PYTHONPATH``.

    Raises
    ------
    ValueError
        For a group's node without the address or the instance type it needs.
    """
    manifest = command.manifest
    env = dict(base_env)
    if command.group is not None and command.group.efa:
        if instance_type is None:
            raise ValueError("a group with an EFA needs the node's instance type (IMDS instance-type)")
        env.update(efa_environment(instance_type))
    env.update(manifest.training.env)
    env.update(secrets or {})
    env.update(
        {
            training.ENV_JOB_ID: command.job_id,
            training.ENV_ATTEMPT: str(command.attempt),
            training.ENV_DATA_DIR: str(job_layout.data_dir),
            training.ENV_CODE_DIR: str(job_layout.code_dir),
            training.ENV_CHECKPOINT_DIR: str(job_layout.checkpoint_dir),
            training.ENV_OUTPUT_DIR: str(job_layout.output_dir),
            training.ENV_CHECKPOINT_SIGNAL: manifest.training.checkpoint.signal,
            training.ENV_MODEL: manifest.outputs.model,
            training.ENV_PROGRESS_FILE: str(job_layout.progress_file(command.attempt)),
            training.ENV_METRICS_FILE: str(metrics_file(job_layout.runtime_dir, command.attempt)),
            training.ENV_GPUS_PER_NODE: str(gpus_per_node),
            ENV_NODE_RANK: str(command.group.node if command.group else 0),
            ENV_NODES: str(command.group.nodes if command.group else 1),
        }
    )
    if command.group is not None:
        env.update(torchrun_environment(command.group, manifest.training.restarts_on_error, local_addr))
    checkpoint = manifest.training.checkpoint
    if checkpoint.auto:
        # Time-based: the agent's interval file decides; a steps value from training.env must not linger.
        env.pop(training.ENV_CHECKPOINT_INTERVAL_STEPS, None)
        env[training.ENV_CHECKPOINT_INTERVAL_FILE] = str(job_layout.checkpoint_interval_file(command.attempt))
    else:
        env.pop(training.ENV_CHECKPOINT_INTERVAL_FILE, None)
        env[training.ENV_CHECKPOINT_INTERVAL_STEPS] = str(checkpoint.interval_steps)
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join([str(job_layout.runtime_dir), *([existing] if existing else [])])
    # Unbuffered output: the log (and its tail in a failure report) must hold the last lines printed.
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def torchrun_environment(group: NodeGroup, max_restarts: int, local_addr: str | None) -> dict[str, str]:
    """The ``PET_`` variables that make this node's ``torchrun`` join its group.

    ``torch.distributed.run`` reads each of its options from ``PET_<OPTION>`` when the command line does not
    give it (``torch/distributed/argparse_util.py``, the ``env`` action). The group meets through the ``c10d``
    rendezvous, whose store node 0 hosts (``is_host``): c10d ranks the nodes by their ``local_addr`` sorted as
    text (``dynamic_rendezvous.py``), and the control plane numbers the nodes in that same order, so node k gets
    group rank k and node 0 global rank 0. No ``PET_NODE_RANK``: torchrun ignores ``--node-rank`` under c10d and
    logs a warning saying so (``config_from_args``); the script reads the node's place from ``SPOTRUN_NODE_RANK``
    or torchrun's ``GROUP_RANK``. Restarts are torch elastic's (``--max-restarts``): the agent does not
    restart a group's command itself, since a node restarting alone could never rejoin the others' run.

    Parameters
    ----------
    group
        This node's place in its group.
    max_restarts
        The manifest's ``training.restarts_on_error``.
    local_addr
        This node's private IPv4 address; node 0 uses ``group.rendezvous_host`` when it is None.

    Returns
    -------
    dict[str, str]
        ``PET_NNODES``, ``PET_RDZV_BACKEND``, ``PET_RDZV_ENDPOINT``, ``PET_RDZV_ID``,
        ``PET_RDZV_CONF``, ``PET_LOCAL_ADDR`` and ``PET_MAX_RESTARTS``.

    Raises
    ------
    ValueError
        When a node other than node 0 has no ``local_addr``: torch would rank it by its host name instead.
    """
    if local_addr is None:
        if group.node != 0:
            raise ValueError(
                f"node {group.node} of the group needs its private IPv4 address (IMDS local-ipv4)"
            )
        local_addr = group.rendezvous_host
    return {
        "PET_NNODES": str(group.nodes),
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": group.endpoint,
        "PET_RDZV_ID": group.rendezvous_id,
        # Said on every node rather than guessed from host names: only node 0 serves the store.
        "PET_RDZV_CONF": f"is_host={'true' if group.node == 0 else 'false'}",
        "PET_LOCAL_ADDR": local_addr,
        "PET_MAX_RESTARTS": str(max_restarts),
    }

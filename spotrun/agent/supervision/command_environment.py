"""The training command's environment: the checkpoint contract, and ``spotrun.training`` on its path."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from spotrun import training
from spotrun.agent.links import replace_file
from spotrun.model import layout
from spotrun.model.agent_protocol.command import AgentCommand

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

    Returns
    -------
    dict[str, str]
        ``base_env``, then the manifest's ``training.env`` and the secrets' values, then the ``SPOTRUN_*``
        contract (which wins), with the runtime directory first on ``PYTHONPATH``.
    """
    manifest = command.manifest
    env = dict(base_env)
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
            training.ENV_GPUS_PER_NODE: str(gpus_per_node),
        }
    )
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

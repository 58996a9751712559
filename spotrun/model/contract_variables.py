"""The names of the checkpoint contract's ``SPOTRUN_*`` variables, and their expansion in the command's argv.

The agent sets these variables in the training command's environment
(``spotrun.agent.supervision.command_environment``); ``spotrun.training`` reads them; the manifest's
``training.command`` may name them as ``${NAME}``. One module so that the three agree. Standard library only:
it is copied onto instances with ``spotrun.training``.

The variables, all set by the agent (a manifest's ``training.env`` cannot override them):

- ``SPOTRUN_JOB_ID``, ``SPOTRUN_ATTEMPT``: the job and its attempt (1, 2, ... one per instance);
- ``SPOTRUN_DATA_DIR``, ``SPOTRUN_CODE_DIR``, ``SPOTRUN_CHECKPOINT_DIR``, ``SPOTRUN_OUTPUT_DIR``: the staged
  inputs, the code (the command's working directory), the checkpoints, the model's directory;
- ``SPOTRUN_CHECKPOINT_INTERVAL_STEPS``, ``SPOTRUN_CHECKPOINT_SIGNAL``: the manifest's checkpoint policy;
- ``SPOTRUN_MODEL``: the model's path under ``SPOTRUN_OUTPUT_DIR`` (``outputs.model``);
- ``SPOTRUN_PROGRESS_FILE``: where :meth:`spotrun.training.Run.report_step` writes the step reached;
- ``SPOTRUN_METRICS_FILE``: where :meth:`spotrun.training.Run.report_metrics` appends the training metrics, one
  JSON line ``{"step": n, "values": {"loss": 0.41}}`` each, which the agent ships with the job's telemetry;
- ``SPOTRUN_CHECKPOINT_INTERVAL_FILE`` (``interval_steps: auto`` only): where the agent writes the interval;
- ``SPOTRUN_GPUS_PER_NODE``: the GPUs of the instance (``nvidia-smi``, else the instance type's count), for
  ``torchrun --nproc-per-node``; the command's argv may say ``"${SPOTRUN_GPUS_PER_NODE}"``, which the agent
  expands (as any ``${SPOTRUN_...}`` or ``${NAME}`` of ``training.env``) since no shell runs it;
- ``SPOTRUN_NODE_RANK``, ``SPOTRUN_NODES``: this node's place in the job's group and the group's size (0 and 1
  for a one-node job). Node k hosts ``torchrun``'s group rank k, so node 0 hosts global rank 0.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

ENV_JOB_ID = "SPOTRUN_JOB_ID"
ENV_ATTEMPT = "SPOTRUN_ATTEMPT"
ENV_DATA_DIR = "SPOTRUN_DATA_DIR"
ENV_CODE_DIR = "SPOTRUN_CODE_DIR"
ENV_CHECKPOINT_DIR = "SPOTRUN_CHECKPOINT_DIR"
ENV_OUTPUT_DIR = "SPOTRUN_OUTPUT_DIR"
ENV_CHECKPOINT_INTERVAL_STEPS = "SPOTRUN_CHECKPOINT_INTERVAL_STEPS"
ENV_CHECKPOINT_SIGNAL = "SPOTRUN_CHECKPOINT_SIGNAL"
ENV_MODEL = "SPOTRUN_MODEL"
ENV_PROGRESS_FILE = "SPOTRUN_PROGRESS_FILE"
ENV_METRICS_FILE = "SPOTRUN_METRICS_FILE"
ENV_GPUS_PER_NODE = "SPOTRUN_GPUS_PER_NODE"
ENV_NODE_RANK = "SPOTRUN_NODE_RANK"
ENV_NODES = "SPOTRUN_NODES"
# Set for checkpoint.interval_steps: auto: the file where the agent says how long after a save the next is due.
ENV_CHECKPOINT_INTERVAL_FILE = "SPOTRUN_CHECKPOINT_INTERVAL_FILE"

CONTRACT_VARIABLES: frozenset[str] = frozenset(
    {
        ENV_JOB_ID,
        ENV_ATTEMPT,
        ENV_DATA_DIR,
        ENV_CODE_DIR,
        ENV_CHECKPOINT_DIR,
        ENV_OUTPUT_DIR,
        ENV_CHECKPOINT_INTERVAL_STEPS,
        ENV_CHECKPOINT_SIGNAL,
        ENV_MODEL,
        ENV_PROGRESS_FILE,
        ENV_METRICS_FILE,
        ENV_GPUS_PER_NODE,
        ENV_NODE_RANK,
        ENV_NODES,
    }
)
"""Every variable the agent sets for the training command (the ``SPOTRUN_*`` contract)."""

# Only the braced form: a bare `$` (a regular expression's anchor, say) stays as written. Whatever is between
# the braces is captured, so that `${not a name}` is refused by name rather than passed on as text.
_REFERENCE: Final = r"\$\{([^}]*)\}"


def argv_references(argv: Iterable[str]) -> list[str]:
    """The names written as ``${NAME}`` in ``argv``, in order (repeats kept).

    Parameters
    ----------
    argv
        The command's arguments.

    Returns
    -------
    list[str]
        What stands between each ``${`` and ``}``.
    """
    return [match.group(1) for argument in argv for match in re.finditer(_REFERENCE, argument)]


def expand_argv(argv: Iterable[str], environment: Mapping[str, str]) -> list[str]:
    """Replace every ``${NAME}`` in ``argv`` with ``environment[NAME]``.

    The command runs without a shell, so this is the only expansion it gets; the manifest's validation has
    already refused any name that is neither a contract variable nor one of ``training.env``.

    Parameters
    ----------
    argv
        The command as written in the manifest.
    environment
        The command's environment.

    Returns
    -------
    list[str]
        The argv to run.

    Raises
    ------
    KeyError
        When a name is not in ``environment`` (the message names it).
    """

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environment:
            raise KeyError(f"${{{name}}} in the command, but {name} is not in its environment")
        return environment[name]

    return [re.sub(_REFERENCE, value, argument) for argument in argv]

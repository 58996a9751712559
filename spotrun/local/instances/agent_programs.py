"""The agent's programs on a simulated instance: the resident agent, the one-step agent, and the SSM script.

On EC2 the user data's systemd unit starts the resident agent (``spotrun-agent serve``) at boot, and the SSM
Agent runs the agent document's script (:func:`spotrun.model.agent_protocol.ssm_document.agent_script`) for
each step, which hands the step to the resident agent when it is alive and starts ``spotrun-agent run``
otherwise. A simulated instance runs the same: the dev venv's agent, and the document's own script with the
instance's directory standing in for ``/run/spotrun`` and ``/var/log``.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from spotrun.model.agent_protocol.ssm_document import AGENT_LOG_LINE, AGENT_PROGRAM, AGENT_RUN_DIR_LINE
from spotrun.shape import SHAPE


def default_agent_argv() -> list[str]:
    """The real one-step agent (``spotrun-agent run``); the command URI is appended."""
    return [sys.executable, "-m", "spotrun.agent", "run", "--command-uri"]


def resident_agent_argv(run_dir: Path) -> list[str]:
    """The resident agent of a simulated instance: the dev venv's ``spotrun-agent serve`` on its directory."""
    return [sys.executable, "-m", "spotrun.agent", "serve", "--run-dir", str(run_dir)]


def instance_agent_script(run_dir: Path, log_path: Path) -> str:
    """The agent document's script as a simulated instance runs it: its paths mapped onto the instance's.

    ``/run/spotrun`` becomes ``run_dir``, the log ``log_path``, and the fallback's ``spotrun-agent run
    --command-uri`` the script's own arguments (``"$@"``: the runtime's agent command), never text of it; the
    rest is the document's text. A trailing ``wait`` keeps the shell the parent of a detached agent until it
    ends, as init reaps it on EC2 (nothing else here would).

    Raises
    ------
    ValueError
        When the document no longer holds exactly one of each line mapped (the emulator would drift from it).
    """
    (step,) = SHAPE.agent_document()["mainSteps"]
    script = "\n".join(step["inputs"]["runCommand"])
    mapped = {
        AGENT_RUN_DIR_LINE: f"spotrun_run={shlex.quote(str(run_dir))}",
        AGENT_LOG_LINE: f"spotrun_log={shlex.quote(str(log_path))}",
        AGENT_PROGRAM: '"$@"',
    }
    for original, replacement in mapped.items():
        if script.count(original) != 1:
            raise ValueError(f"the agent document's script no longer holds {original!r} exactly once")
        script = script.replace(original, replacement)
    return f"{script}\nwait\n"

"""The instance agent's SSM Command document: its one parameter, its shell script, and its content.

The control plane sends each step of a job to the instance with this document (``agent_step``, the deadline's
move off spot); the deployment declares it once (:class:`spotrun.shape.DeploymentShape`, under
``agent_document_name``); the emulator plays its script on a simulated instance
(:mod:`spotrun.local.instances.agent_programs`). The places the script names on the instance are the agent's own layout
(:mod:`spotrun.model.layout`), so the agent, the document and the emulator read them from one home.
"""

from __future__ import annotations

import re
from typing import Any, get_args

from spotrun.model.agent_protocol.command import AgentStep
from spotrun.model.layout import (
    AGENT_INBOX,
    AGENT_LOG_FILE,
    AGENT_PID_FILE,
    AGENT_RUN_DIR,
    BUCKET_NAME_PATTERN,
    JOB_ID_PATTERN,
    JOBS_PREFIX,
)

# The agent document's one parameter, and the environment variable it reaches the script as (interpolationType
# ENV_VAR names it SSM_<parameter>).
AGENT_COMMAND_PARAMETER = "commandUri"
AGENT_COMMAND_VARIABLE = f"SSM_{AGENT_COMMAND_PARAMETER}"
# The only values SendCommand accepts for it: an S3 bucket name (3-63 lowercase letters, digits, dots and hyphens,
# beginning and ending with a letter or digit) and the key spotrun.model.layout.agent_command_key writes for a job
# id that spotrun.model.job.ids.job_id_for mints (a slug, "-", 12 hex digits), an attempt, a step and, for a node
# other than node 0 of a multi-node job, the node. No character a shell treats specially (space, quote, $, `, ;, |,
# &, newline...) can match.
AGENT_COMMAND_URI_PATTERN = (
    rf"^s3://{BUCKET_NAME_PATTERN}/{re.escape(JOBS_PREFIX)}{JOB_ID_PATTERN}/agent/attempt-[0-9]{{3,}}-"
    rf"(?:{'|'.join(get_args(AgentStep))})(?:-node[1-9][0-9]?)?\.json$"
)

# The program the script's fallback starts, and the two places on the instance it names (the emulator maps them
# onto a simulated instance's directory: spotrun.local.instances.agent_programs).
AGENT_PROGRAM = "spotrun-agent run --command-uri"
AGENT_RUN_DIR_LINE = f"spotrun_run={AGENT_RUN_DIR}"
AGENT_LOG_LINE = f"spotrun_log={AGENT_LOG_FILE}"


def agent_document(name: str) -> dict[str, Any]:
    """Content of the agent's SSM Command document: hand one step's command URI to the instance agent, detached.

    Run Command would otherwise hold the invocation for the whole step; the agent reports to the workflow
    itself through the task token, which travels in the S3 document, never as a parameter.

    Exactly one of two ways runs the step (:func:`agent_script`): when the instance's resident agent
    (``spotrun-agent serve``, :mod:`spotrun.agent.resident_server`) is alive, the URI is handed to it through its
    inbox and it forks a child that runs the step at once, without starting Python; otherwise (the agent
    not started yet, or dead) a fresh ``spotrun-agent run`` process runs it, as before.

    The URI never becomes script text. With ``interpolationType: ENV_VAR`` the SSM Agent (3.3.2746.0 or
    later) hands the value to the script as the environment variable ``SSM_commandUri``, which the script
    only ever expands quoted; a ``{{ commandUri }}`` reference would be pasted into the shell source
    instead (https://docs.aws.amazon.com/systems-manager/latest/userguide/documents-syntax-data-elements-parameters.html,
    "interpolationType"). The ``allowedPattern``, which SendCommand checks before anything runs, admits
    exactly the keys the control plane writes (:data:`AGENT_COMMAND_URI_PATTERN`). An older agent sets no
    variable: the first line then fails the command, naming the cause, instead of starting the agent on
    nothing.

    Parameters
    ----------
    name
        The document's name (:attr:`spotrun.shape.DeploymentShape.agent_document_name`), named in its
        description.

    Returns
    -------
    dict
        The document's content (schema 2.2), as SSM CreateDocument takes it in JSON.
    """
    return {
        "schemaVersion": "2.2",
        "description": f"{name}: runs one step of a spotrun job with the instance agent.",
        "parameters": {
            AGENT_COMMAND_PARAMETER: {
                "type": "String",
                "description": "S3 URI of the AgentCommand document for this step.",
                "allowedPattern": AGENT_COMMAND_URI_PATTERN,
                "interpolationType": "ENV_VAR",
            }
        },
        "mainSteps": [
            {"action": "aws:runShellScript", "name": "runAgent", "inputs": {"runCommand": agent_script()}}
        ],
    }


def agent_script() -> list[str]:
    """The lines of the agent document's shell script (POSIX ``sh``; SSM runs them as one script, as root).

    1. refuse to run without ``SSM_commandUri`` (an SSM Agent older than ENV_VAR interpolation);
    2. ``spotrun_resident``: the resident agent is alive when its pid file names a live, non-zombie process
       whose start time (``/proc/<pid>/stat`` field 22) is the one recorded, so a recycled pid never counts
       (as :func:`spotrun.agent.supervision.notice_relay.running_supervisor` checks); ``kill -0`` last;
    3. ``spotrun_hand_over``: the URI is written to a temporary dot-file of the inbox (``mktemp``, mode 0600)
       and published under its final name with ``ln``, which never replaces an existing file (link(2)); the
       command is handed over exactly when ``ln`` succeeded, and the resident agent never reads dot-files, so
       a half-written or failed hand-over is never run by it;
    4. handed over: wake the agent (``SIGWINCH``, whose default action is to ignore it, so a wrong process is
       never hurt) and exit; otherwise start ``spotrun-agent run`` detached, as before the resident agent.

    So exactly one of the two runs the step. Every expansion of the URI is quoted.
    """
    variable = AGENT_COMMAND_VARIABLE
    inbox = f'"$spotrun_run/{AGENT_INBOX}"'
    return [
        f'test -n "${{{variable}:-}}" || {{ echo "spotrun: {variable} is not set: interpolationType ENV_VAR needs '
        'SSM Agent 3.3.2746.0 or later" >&2; exit 1; }',
        AGENT_RUN_DIR_LINE,
        AGENT_LOG_LINE,
        "spotrun_resident() {",
        f'  {{ read -r spotrun_pid spotrun_started < "$spotrun_run/{AGENT_PID_FILE}"; }} 2>/dev/null || return 1',
        '  spotrun_stat=$(cat "/proc/$spotrun_pid/stat" 2>/dev/null) || return 1',
        '  set -- ${spotrun_stat##*") "}',
        '  [ -n "$spotrun_started" ] && [ "${1:-Z}" != Z ] && [ "${20:-}" = "$spotrun_started" ] &&',
        '    kill -0 "$spotrun_pid" 2>/dev/null',
        "}",
        "spotrun_hand_over() {",
        f"  spotrun_tmp=$(mktemp {inbox}/.XXXXXXXX 2>/dev/null) || return 1",
        f'  if printf \'%s\\n\' "${variable}" > "$spotrun_tmp" &&',
        f'    ln "$spotrun_tmp" {inbox}/"${{spotrun_tmp##*/.}}"; then',
        '    rm -f "$spotrun_tmp"; return 0',
        "  fi",
        '  rm -f "$spotrun_tmp"; return 1',
        "}",
        "if spotrun_resident && spotrun_hand_over; then",
        '  kill -s WINCH "$spotrun_pid" 2>/dev/null; exit 0',
        "fi",
        f'nohup {AGENT_PROGRAM} "${variable}" >> "$spotrun_log" 2>&1 &',
    ]

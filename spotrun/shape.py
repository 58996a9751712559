"""The one declaration of the deployment's shape.

Functions, event rules, tables, buckets, the agent's SSM document and the state machine's substitutions are
declared here once, in plain Python with no CDK import. The CDK app (``infra/``) and the embedded runtime
(``spotrun.local``) both build from this module, so the local system cannot drift from the deployed one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from spotrun.model.command import AgentStep
from spotrun.model.ec2 import GONE_STATES, REBALANCE, SPOT_WARNING, STATE_CHANGE
from spotrun.model.layout import (
    AGENT_INBOX,
    AGENT_LOG_FILE,
    AGENT_PID_FILE,
    AGENT_RUN_DIR,
    ALL_JOBS_INDEX,
    BUCKET_NAME_PATTERN,
    BY_STATUS_INDEX,
    JOB_ID_PATTERN,
    JOBS_PREFIX,
    KIND_ATTRIBUTE,
    MANIFEST_PREFIX,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
STATE_MACHINE_FILE = REPO_ROOT / "statemachines" / "job.asl.json"

SERVICE_NAME = "spotrun"

# The agent document's one parameter, and the environment variable it reaches the script as (interpolationType
# ENV_VAR names it SSM_<parameter>).
AGENT_COMMAND_PARAMETER = "commandUri"
AGENT_COMMAND_VARIABLE = f"SSM_{AGENT_COMMAND_PARAMETER}"
# The only values SendCommand accepts for it: an S3 bucket name (3-63 lowercase letters, digits, dots and hyphens,
# beginning and ending with a letter or digit) and the key spotrun.model.layout.agent_command_key writes for a job
# id that spotrun.model.job_ids.job_id_for mints (a slug, "-", 12 hex digits), an attempt and a step. No character a
# shell treats specially (space, quote, $, `, ;, |, &, newline...) can match.
AGENT_COMMAND_URI_PATTERN = (
    rf"^s3://{BUCKET_NAME_PATTERN}/{re.escape(JOBS_PREFIX)}{JOB_ID_PATTERN}/agent/attempt-[0-9]{{3,}}-"
    rf"(?:{'|'.join(get_args(AgentStep))})\.json$"
)
METRICS_NAMESPACE = "spotrun"
# How long the live copy of the training logs stays in CloudWatch Logs (spotrun.model.layout.log_group); the
# S3 copy of each attempt's log stays with the job's other objects.
LOG_RETENTION_DAYS = 30


@dataclass(frozen=True)
class FunctionSpec:
    """One Lambda function."""

    name: str
    handler: str  # dotted "module.attribute", importable from the repository root
    description: str
    timeout_seconds: int = 60
    memory_mb: int = 512
    # Which settings (see spotrun.aws.settings.Settings) the function reads; the IAM grants follow from them.
    settings: tuple[str, ...] = ()


@dataclass(frozen=True)
class TableSpec:
    """One DynamoDB table (on-demand billing)."""

    logical_name: str
    partition_key: str
    sort_key: str | None = None
    ttl_attribute: str | None = None
    global_indexes: tuple[tuple[str, str, str | None], ...] = ()  # (index name, partition key, sort key)


@dataclass(frozen=True)
class BucketSpec:
    """One S3 bucket (private, encrypted, TLS only)."""

    logical_name: str
    eventbridge_notifications: bool = False
    versioned: bool = True


@dataclass(frozen=True)
class BusSpec:
    """One custom EventBridge bus on which spotrun publishes (source ``spotrun``); its name is ``setting``."""

    logical_name: str
    description: str
    setting: str


@dataclass(frozen=True)
class RuleSpec:
    """One EventBridge rule on the default bus, delivering to one function."""

    name: str
    description: str
    pattern: dict[str, Any]
    target_function: str
    # Logical name of the bucket the rule is scoped to; builders add its real name to the pattern.
    source_bucket: str | None = None


@dataclass(frozen=True)
class DeploymentShape:
    """Everything a deployment is made of."""

    functions: tuple[FunctionSpec, ...]
    tables: tuple[TableSpec, ...]
    buckets: tuple[BucketSpec, ...]
    rules: tuple[RuleSpec, ...]
    buses: tuple[BusSpec, ...] = ()
    # Scheduled retraining: the EventBridge Scheduler group and the function every schedule invokes.
    schedule_group: str = "spotrun"
    schedule_target: str = "scheduled_run"
    # ASL placeholder (without ${}) -> name of the function whose ARN fills it.
    state_machine_functions: dict[str, str] = field(default_factory=dict)
    agent_document_name: str = "spotrun-agent-run"

    def agent_document(self) -> dict[str, Any]:
        """Content of the agent's SSM Command document: hand one step's command URI to the instance agent, detached.

        Run Command would otherwise hold the invocation for the whole step; the agent reports to the workflow
        itself through the task token, which travels in the S3 document, never as a parameter.

        Exactly one of two ways runs the step (:func:`agent_script`): when the instance's resident agent
        (``spotrun-agent serve``, :mod:`spotrun.agent.resident`) is alive, the URI is handed to it through its
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
        """
        return {
            "schemaVersion": "2.2",
            "description": f"{self.agent_document_name}: runs one step of a spotrun job with the instance agent.",
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

    def function(self, name: str) -> FunctionSpec:
        """Return the function declared under ``name``."""
        for spec in self.functions:
            if spec.name == name:
                return spec
        raise KeyError(name)


# The program the script's fallback starts, and the two places on the instance it names (the emulator maps them
# onto a simulated instance's directory: spotrun.local.instances).
AGENT_PROGRAM = "spotrun-agent run --command-uri"
AGENT_RUN_DIR_LINE = f"spotrun_run={AGENT_RUN_DIR}"
AGENT_LOG_LINE = f"spotrun_log={AGENT_LOG_FILE}"


def agent_script() -> list[str]:
    """The lines of the agent document's shell script (POSIX ``sh``; SSM runs them as one script, as root).

    1. refuse to run without ``SSM_commandUri`` (an SSM Agent older than ENV_VAR interpolation);
    2. ``spotrun_resident``: the resident agent is alive when its pid file names a live, non-zombie process
       whose start time (``/proc/<pid>/stat`` field 22) is the one recorded, so a recycled pid never counts
       (as :func:`spotrun.agent.notify.running_supervisor` checks); ``kill -0`` last;
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


# Every function that writes jobs publishes their status changes on the events bus.
_ALL_STORE = ("jobs_table", "event_bus_name")


def rule_pattern(rule: RuleSpec, bucket_names: dict[str, str]) -> dict[str, Any]:
    """Return the rule's event pattern with the real name of its source bucket filled in.

    Parameters
    ----------
    rule
        The declared rule.
    bucket_names
        Logical bucket name -> deployed bucket name.

    Returns
    -------
    dict
        The EventBridge event pattern.
    """
    if rule.source_bucket is None:
        return rule.pattern
    detail = {**rule.pattern.get("detail", {}), "bucket": {"name": [bucket_names[rule.source_bucket]]}}
    return {**rule.pattern, "detail": detail}


SHAPE = DeploymentShape(
    functions=(
        FunctionSpec(
            "submit",
            "functions.submit.handler",
            "Validates a dropped manifest, records the job once and starts its workflow.",
            settings=(
                *_ALL_STORE,
                "idempotency_table",
                "jobs_bucket",
                "archive_bucket",
                "archive_buckets",
                "reference_patterns",
                "state_machine_arn",
                "time_scale",
            ),
        ),
        FunctionSpec(
            "acquire",
            "functions.acquire.handler",
            "Requests spot GPU capacity with an instant EC2 fleet over several types and zones.",
            settings=(*_ALL_STORE, "subnet_ids", "launch_template_name"),
        ),
        FunctionSpec(
            "instance_ready",
            "functions.instance_ready.handler",
            "Reports whether the job's instance is running and reachable.",
            settings=_ALL_STORE,
        ),
        FunctionSpec(
            "agent_step",
            "functions.agent_step.handler",
            "Sends a step (stage, train) to the instance agent through SSM, with the workflow's task token.",
            settings=(*_ALL_STORE, "jobs_bucket", "agent_document_name", "agent_report_url"),
        ),
        FunctionSpec(
            "archive",
            "functions.archive.handler",
            "Copies the trained model to the archive bucket in the manifest's Glacier class.",
            timeout_seconds=300,
            settings=(*_ALL_STORE, "jobs_bucket", "archive_bucket", "archive_buckets"),
        ),
        FunctionSpec(
            "release",
            "functions.release.handler",
            "Terminates every instance of the job; safe to call any number of times.",
            settings=_ALL_STORE,
        ),
        FunctionSpec(
            "interrupted",
            "functions.interrupted.handler",
            "Records an interruption: ends the attempt, measures the work lost, releases the instance.",
            settings=(*_ALL_STORE, "jobs_bucket"),
        ),
        FunctionSpec(
            "ec2_events",
            "functions.ec2_events.handler",
            "Acts on EC2 spot warnings, rebalance recommendations and state changes of the jobs' instances.",
            settings=(
                *_ALL_STORE,
                "jobs_bucket",
                "agent_document_name",
                "subnet_ids",
                "launch_template_name",
                "overlap_replacement",
                "time_scale",
            ),
        ),
        FunctionSpec(
            "api",
            "functions.api.app.handler",
            "The REST API (behind API Gateway, IAM auth): submit, list, show, cancel jobs; logs; model restores.",
            timeout_seconds=29,  # API Gateway's integration timeout
            settings=(
                *_ALL_STORE,
                "idempotency_table",
                "jobs_bucket",
                "archive_bucket",
                "archive_buckets",
                "reference_patterns",
                "state_machine_arn",
                "time_scale",
                "schedule_group",
                "scheduler_role_arn",
                "scheduled_run_arn",
                "instance_role_name",
                "job_access_role_arn",
                # The deadline's move off spot sends the agent its notice (control.deadline_moves).
                "agent_document_name",
                # POST /plan: the pools a fleet request would offer (the subnets' zones).
                "subnet_ids",
            ),
        ),
        FunctionSpec(
            "scheduled_run",
            "functions.scheduled_run.handler",
            "One firing of a schedule: starts a new job, or records a skip when the inputs did not change.",
            settings=(*_ALL_STORE, "jobs_bucket", "state_machine_arn", "time_scale"),
        ),
        FunctionSpec(
            "finalize",
            "functions.finalize.handler",
            "Records the job's outcome, error and cost.",
            settings=_ALL_STORE,
        ),
    ),
    tables=(
        TableSpec(
            "jobs",
            partition_key="pk",
            sort_key="sk",
            # The API's listing, newest first: by status, and over every job (job items carry kind = "JOB").
            global_indexes=(
                (BY_STATUS_INDEX, "status", "created_at"),
                (ALL_JOBS_INDEX, KIND_ATTRIBUTE, "created_at"),
            ),
        ),
        TableSpec("idempotency", partition_key="id", ttl_attribute="expiration"),
    ),
    buckets=(
        BucketSpec("jobs", eventbridge_notifications=True),
        BucketSpec("archive"),
    ),
    buses=(
        BusSpec("events", "Job status changes (detail-type 'Spotrun Job Status Change').", "event_bus_name"),
    ),
    rules=(
        RuleSpec(
            "manifest-dropped",
            "A manifest was put under manifests/ in the jobs bucket.",
            pattern={
                "source": ["aws.s3"],
                "detail-type": ["Object Created"],
                "detail": {"object": {"key": [{"prefix": MANIFEST_PREFIX}]}},
            },
            target_function="submit",
            source_bucket="jobs",
        ),
        RuleSpec(
            "spot-interruption-warning",
            "EC2 will reclaim a spot instance in two minutes.",
            pattern={"source": ["aws.ec2"], "detail-type": [SPOT_WARNING]},
            target_function="ec2_events",
        ),
        RuleSpec(
            "rebalance-recommendation",
            "A spot instance is at elevated risk of interruption.",
            pattern={"source": ["aws.ec2"], "detail-type": [REBALANCE]},
            target_function="ec2_events",
        ),
        RuleSpec(
            "instance-stopped",
            "An instance is shutting down, stopping or gone.",
            pattern={
                "source": ["aws.ec2"],
                "detail-type": [STATE_CHANGE],
                "detail": {"state": list(GONE_STATES)},
            },
            target_function="ec2_events",
        ),
    ),
    state_machine_functions={
        "AcquireFunctionArn": "acquire",
        "InstanceReadyFunctionArn": "instance_ready",
        "AgentStepFunctionArn": "agent_step",
        "ArchiveFunctionArn": "archive",
        "ReleaseFunctionArn": "release",
        "InterruptedFunctionArn": "interrupted",
        "FinalizeFunctionArn": "finalize",
    },
)

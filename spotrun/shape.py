"""The one declaration of the deployment's shape.

Functions, event rules, tables, buckets, the agent's SSM document and the state machine's substitutions are
declared here once, in plain Python with no CDK import. The CDK app (``infra/``) and the embedded runtime
(``spotrun.local``) both build from this module, so the local system cannot drift from the deployed one.
The agent document's content, its parameter and its shell script are the agent's own
(:mod:`spotrun.model.agent_protocol.ssm_document`); the shape names the document and hands it over. The
deployer's notification subscribers are an option of each deployment, not part of its fixed shape: their rules
and targets are declared in :mod:`spotrun.notifications` (kept out of this module, which every function imports
at its cold start), on the bus :attr:`DeploymentShape.notifications_bus` names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from spotrun.model.agent_protocol.api_paths import AGENT_ROUTES_PREFIX, in_subtree
from spotrun.model.capacity.ec2_states import GONE_STATES, REBALANCE, SPOT_WARNING, STATE_CHANGE
from spotrun.model.job.bus_events import RETURN_TO_SPOT, SOURCE, STATUS_CHANGE
from spotrun.model.layout import ALL_JOBS_INDEX, BY_STATUS_INDEX, KIND_ATTRIBUTE, MANIFEST_PREFIX

REPO_ROOT = Path(__file__).resolve().parent.parent
STATE_MACHINE_FILE = REPO_ROOT / "statemachines" / "job.asl.json"

SERVICE_NAME = "spotrun"
METRICS_NAMESPACE = "spotrun"
# How long the live copy of the training logs stays in CloudWatch Logs (spotrun.model.layout.log_group); the
# S3 copy of each attempt's log stays with the job's other objects.
LOG_RETENTION_DAYS = 30


# The specs are NamedTuples rather than frozen dataclasses: immutable records either way, but every function
# imports this module at its cold start, and defining a frozen dataclass runs about four times the instructions
# (docs/development/cold-start.md, "These cuts").
class FunctionSpec(NamedTuple):
    """One Lambda function."""

    name: str
    handler: str  # dotted "module.attribute", importable from the repository root
    description: str
    timeout_seconds: int = 60
    memory_mb: int = 512
    # Which settings (see spotrun.aws.settings.Settings) the function reads; the IAM grants follow from them.
    settings: tuple[str, ...] = ()


class TableSpec(NamedTuple):
    """One DynamoDB table (on-demand billing)."""

    logical_name: str
    partition_key: str
    sort_key: str | None = None
    ttl_attribute: str | None = None
    global_indexes: tuple[tuple[str, str, str | None], ...] = ()  # (index name, partition key, sort key)


class BucketSpec(NamedTuple):
    """One S3 bucket (private, encrypted, TLS only)."""

    logical_name: str
    eventbridge_notifications: bool = False
    versioned: bool = True


class BusSpec(NamedTuple):
    """One custom EventBridge bus on which spotrun publishes (source ``spotrun``); its name is ``setting``."""

    logical_name: str
    description: str
    setting: str


class RuleSpec(NamedTuple):
    """One EventBridge rule, delivering to one function: on the default bus, or on one of spotrun's own."""

    name: str
    description: str
    pattern: dict[str, Any]
    target_function: str
    # Logical name of the bucket the rule is scoped to; builders add its real name to the pattern.
    source_bucket: str | None = None
    # Logical name of the spotrun bus (a BusSpec) the rule listens on; None: the default bus.
    bus: str | None = None


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
    # The REST API: the function every path goes to, and the subtrees (a resource and every path beneath it)
    # that go to another function instead.
    api_function: str = "api"
    api_routes: tuple[tuple[str, str], ...] = ()
    # The bus whose events the deployer's notification subscriptions hear (spotrun.notifications).
    notifications_bus: str = "events"

    def __post_init__(self) -> None:
        # A route to a function the shape lacks would fail only when API Gateway (or the emulator) is built.
        declared = {spec.name for spec in self.functions}
        routed = {self.api_function, *(function for _, function in self.api_routes)} - declared
        if self.api_routes and routed:
            raise ValueError(
                f"the API routes paths to functions the shape does not declare: {sorted(routed)}"
            )

    def agent_document(self) -> dict[str, Any]:
        """Content of the agent's SSM Command document
        (:func:`spotrun.model.agent_protocol.ssm_document.agent_document`)."""
        # Imported here: only infra and the emulator build the document's content. Every Lambda function imports
        # this module and none reads the content; importing it at module level loaded the agent's command models
        # (spotrun.model.agent_protocol.command) into every handler's cold start (docs/development/cold-start.md).
        from spotrun.model.agent_protocol.ssm_document import agent_document

        return agent_document(self.agent_document_name)

    def api_function_for(self, path: str) -> str:
        """The function API Gateway sends a request for ``path`` to (:attr:`api_routes`, else :attr:`api_function`)."""
        for prefix, function in self.api_routes:
            if in_subtree(path, prefix):
                return function
        return self.api_function

    def function(self, name: str) -> FunctionSpec:
        """Return the function declared under ``name``."""
        for spec in self.functions:
            if spec.name == name:
                return spec
        raise KeyError(name)


# Every function that writes jobs publishes their status changes on the events bus.
_ALL_STORE = ("jobs_table", "event_bus_name")
# What submitting a job reads, from a dropped manifest (submit) or POST /jobs (api): both run the same use case.
_SUBMISSION = (
    "idempotency_table",
    "jobs_bucket",
    "archive_bucket",
    "archive_buckets",
    "reference_patterns",
    "state_machine_arn",
    "time_scale",
)
# What launching instances reads: the subnets and their cluster placement groups (one per subnet, same order),
# the plain launch template and the one of multi-node groups with an EFA.
_LAUNCH = ("subnet_ids", "placement_group_names", "launch_template_name", "efa_launch_template_name")


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
            settings=(*_ALL_STORE, *_SUBMISSION),
        ),
        FunctionSpec(
            "acquire",
            "functions.acquire.handler",
            "Requests spot GPU capacity with an instant EC2 fleet over several types and zones.",
            settings=(*_ALL_STORE, *_LAUNCH),
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
            "Records an interruption: ends the attempt, measures the work lost, releases the lost instances.",
            settings=(*_ALL_STORE, "jobs_bucket", "keep_healthy_nodes"),
        ),
        FunctionSpec(
            "ec2_events",
            "functions.ec2_events.handler",
            "Acts on EC2 spot warnings, rebalance recommendations and state changes of the jobs' instances.",
            settings=(
                *_ALL_STORE,
                "jobs_bucket",
                "agent_document_name",
                *_LAUNCH,
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
                *_SUBMISSION,
                "schedule_group",
                "scheduler_role_arn",
                "scheduled_run_arn",
                # POST /plan: the pools a fleet request would offer (the subnets' zones).
                "subnet_ids",
            ),
        ),
        FunctionSpec(
            "agent_api",
            "functions.api.agent_app.handler",
            "The API's agent routes (IAM auth, the instance role only): step reports, the job's S3 credentials.",
            timeout_seconds=29,  # API Gateway's integration timeout
            settings=(
                *_ALL_STORE,
                "jobs_bucket",
                "time_scale",
                # Only the instance of the job's open attempt is heard (control.agent_reports).
                "instance_role_name",
                # The job's S3 credentials: a session of the job-access role (control.job_credentials).
                "job_access_role_arn",
                # A heartbeat's deadline move off spot sends the agent its notice (control.deadline_moves).
                "agent_document_name",
            ),
        ),
        FunctionSpec(
            "scheduled_run",
            "functions.scheduled_run.handler",
            "One firing of a schedule: starts a new job, or records a skip when the inputs did not change.",
            settings=(*_ALL_STORE, "jobs_bucket", "state_machine_arn", "time_scale"),
        ),
        FunctionSpec(
            "deadline_return",
            "functions.deadline_return.handler",
            "Moves a deadline job from on-demand back to spot once EC2 has spot for it (asked by its heartbeat).",
            settings=(
                *_ALL_STORE,
                "jobs_bucket",
                "agent_document_name",
                "subnet_ids",
                "launch_template_name",
                "time_scale",
            ),
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
        BusSpec(
            "events",
            f"Job status changes (detail-type '{STATUS_CHANGE}'); the control plane's own requests "
            f"('{RETURN_TO_SPOT}').",
            "event_bus_name",
        ),
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
        RuleSpec(
            "deadline-return-to-spot",
            "A deadline job on on-demand has the slack to return to spot (control.deadline_moves).",
            pattern={"source": [SOURCE], "detail-type": [RETURN_TO_SPOT]},
            target_function="deadline_return",
            bus="events",
        ),
    ),
    # The agents' routes have a function of their own: the users' API holds none of what they may ask for.
    api_routes=((AGENT_ROUTES_PREFIX, "agent_api"),),
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

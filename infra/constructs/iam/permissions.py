"""What each Lambda function may do in AWS: derived from the settings it reads, plus a short table per function.

A function's :attr:`~spotrun.shape.FunctionSpec.settings` say what it touches (``jobs_table`` -> item access to
that table, ``state_machine_arn`` -> starting executions, ...). Some calls follow from the code rather than from
a setting (``release`` terminates instances); :data:`FUNCTION_GRANTS` lists those, and
:data:`infra.constructs.iam.bucket_access.BUCKET_ACCESS` says
which keys of a bucket a function reads or writes. A function that names a bucket setting without an entry in
:data:`BUCKET_ACCESS` stops the synth: every new function declares its S3 access here, on purpose. Launching
(``launch_template_name``, widened by ``efa_launch_template_name`` and ``placement_group_names``) is
:mod:`infra.constructs.iam.grants_launch`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from infra.constructs.iam.bucket_access import BUCKET_ACCESS, LIST, bucket_grant
from infra.constructs.iam.grant_types import INSTANCES, NO_RESOURCE_LEVEL, Grant, Targets, arn_of
from infra.constructs.iam.grants_launch import LAUNCH_REFINEMENTS, launch_grants
from infra.constructs.iam.grants_scheduling import manage_schedules, pass_scheduler_role, put_events
from spotrun.model.layout import JOB_ID_TAG
from spotrun.shape import FunctionSpec

TAGGED_INSTANCES = {"StringLike": {f"aws:ResourceTag/{JOB_ID_TAG}": "*"}}


def _table(logical: str) -> Callable[[Targets], list[Grant]]:
    def grants(targets: Targets) -> list[Grant]:
        arn = targets.table_arns[logical]
        resources = (arn, f"{arn}/index/*") if logical in targets.tables_with_indexes else (arn,)
        return [
            Grant(
                (
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "dynamodb:UpdateItem",
                    "dynamodb:DeleteItem",
                    "dynamodb:Query",
                    "dynamodb:ConditionCheckItem",
                ),
                resources,
                f"item reads and conditional writes on the {logical} table",
            )
        ]

    return grants


def _start_execution(targets: Targets) -> list[Grant]:
    return [Grant(("states:StartExecution",), (targets.state_machine_arn,), "starts the job's workflow")]


def _send_command(targets: Targets) -> list[Grant]:
    # Two statements: the tag condition must hold for instances, and a document carries no such tag.
    return [
        Grant(
            ("ssm:SendCommand",),
            (arn_of("ssm", f"document/{targets.agent_document_name}"),),
            "runs the agent through the project's own SSM document only",
        ),
        Grant(
            ("ssm:SendCommand",),
            (INSTANCES,),
            f"only on instances tagged {JOB_ID_TAG} (spotrun tags only while launching from its template)",
            {"StringLike": {f"ssm:resourceTag/{JOB_ID_TAG}": "*"}},
        ),
    ]


def _describe_subnets(_targets: Targets) -> list[Grant]:
    return [Grant(("ec2:DescribeSubnets",), ("*",), NO_RESOURCE_LEVEL)]


def _terminate(_targets: Targets) -> list[Grant]:
    return [
        Grant(
            ("ec2:TerminateInstances",),
            (INSTANCES,),
            f"terminates only instances tagged {JOB_ID_TAG} (spotrun tags only while launching from its template)",
            TAGGED_INSTANCES,
        )
    ]


def _describe_instances(_targets: Targets) -> list[Grant]:
    return [Grant(("ec2:DescribeInstances",), ("*",), NO_RESOURCE_LEVEL)]


def _describe_managed_nodes(_targets: Targets) -> list[Grant]:
    # Readiness waits for the instance's SSM agent to be Online before the first command.
    return [
        Grant(
            ("ssm:DescribeInstanceInformation",),
            ("*",),
            "DescribeInstanceInformation has no resource-level permissions in IAM, so it is granted on '*'",
        )
    ]


def _spot_prices(_targets: Targets) -> list[Grant]:
    return [Grant(("ec2:DescribeSpotPriceHistory",), ("*",), NO_RESOURCE_LEVEL)]


def _fail_tasks(targets: Targets) -> list[Grant]:
    return [
        Grant(
            ("states:SendTaskFailure",),
            (targets.state_machine_arn,),
            "fails the waiting task of the workflow's own executions when their instance is gone",
        )
    ]


def _answer_agent_tasks(targets: Targets) -> list[Grant]:
    return [
        Grant(
            ("states:SendTaskSuccess", "states:SendTaskFailure", "states:SendTaskHeartbeat"),
            (targets.state_machine_arn,),
            "answers the workflow's own tasks for the agent of the job's instance (the instance holds no token)",
        )
    ]


def _stop_executions(targets: Targets) -> list[Grant]:
    return [
        Grant(
            ("states:DescribeExecution", "states:StopExecution"),
            (arn_of("states", f"execution:{targets.state_machine_name}:*"),),
            "cancel stops the executions of the job workflow, and of no other state machine",
        )
    ]


def _assume_job_access(targets: Targets) -> list[Grant]:
    return [
        Grant(
            ("sts:AssumeRole",),
            (targets.job_access_role_arn,),
            "assumes the job-access role, and no other, for the S3 credentials of one job's instance",
        )
    ]


def _list_data_buckets(targets: Targets) -> list[Grant]:
    """Admission lists each data input and code prefix (does it exist?) before a job is bought an instance."""
    return [
        Grant(
            LIST,
            (bucket_arn,),
            f"lists keys of the data bucket {name} (does a job's input exist?); reads none",
        )
        for name, bucket_arn in targets.data_bucket_arns.items()
    ]


def _read_training_logs(targets: Targets) -> list[Grant]:
    return [
        Grant(
            ("logs:GetLogEvents",),
            (f"{targets.training_logs_arn}:log-stream:*",),
            "reads the live training logs (GET /jobs/{id}/logs): the streams of the deployment's training log "
            "group, and of no other group",
        )
    ]


def _open_training_log_streams(targets: Targets) -> list[Grant]:
    return [
        # Judged on the group, in either of its ARN forms
        # (https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/iam-access-control-overview-cwl.html).
        Grant(
            ("logs:CreateLogStream",),
            (targets.training_logs_arn, f"{targets.training_logs_arn}:*"),
            "creates each attempt's stream in the deployment's training log group when it issues the job's "
            "credentials (which may write the stream, not create it)",
        ),
    ]


# Setting -> what reading it implies. Bucket settings are refined per function by BUCKET_ACCESS.
SETTING_GRANTS: dict[str, Callable[[Targets], list[Grant]]] = {
    "jobs_table": _table("jobs"),
    "idempotency_table": _table("idempotency"),
    "state_machine_arn": _start_execution,
    "agent_document_name": _send_command,
    "subnet_ids": _describe_subnets,
    "event_bus_name": put_events,
    "schedule_group": manage_schedules,
    "scheduler_role_arn": pass_scheduler_role,
    "job_access_role_arn": _assume_job_access,
}

# Calls a function makes that none of its settings implies.
FUNCTION_GRANTS: dict[str, tuple[Callable[[Targets], list[Grant]], ...]] = {
    "acquire": (_spot_prices, _describe_instances),  # the price paid; whether a standby is still alive
    # A boot that times out is terminated; ready also means SSM lists the instance Online.
    "instance_ready": (_describe_instances, _terminate, _describe_managed_nodes),
    "release": (_terminate,),
    "interrupted": (_terminate,),
    # A standby launched on the warning loses a race with a second warning: it is terminated again.
    "ec2_events": (_spot_prices, _terminate, _fail_tasks),
    # The return to spot's standby: its price; terminated again when it loses a race with another delivery.
    "deadline_return": (_spot_prices, _terminate),
    # cancel: stop the workflow, terminate the job's instances. POST /plan reads today's spot prices.
    "api": (_stop_executions, _terminate, _list_data_buckets, _spot_prices, _read_training_logs),
    # A report answers the workflow's task; the job's credentials open the attempt's log stream first.
    "agent_api": (_answer_agent_tasks, _open_training_log_streams),
    # Every entry point refuses inputs and code that do not exist (spotrun.control.staged_sources).
    "submit": (_list_data_buckets,),
    "scheduled_run": (_list_data_buckets,),
}


def grants_for(spec: FunctionSpec, targets: Targets, bucket_settings: Mapping[str, str]) -> list[Grant]:
    """Every statement the function ``spec`` gets.

    Parameters
    ----------
    spec
        The function's declaration.
    targets
        The stack's resources.
    bucket_settings
        Setting name -> logical bucket name (``jobs_bucket`` -> ``jobs``).

    Returns
    -------
    list[Grant]
        Statements implied by its settings, then by :data:`FUNCTION_GRANTS`.

    Raises
    ------
    KeyError
        When the function reads a bucket setting without a :data:`BUCKET_ACCESS` entry for that bucket, or the
        placement groups or EFA template without the launch template they refine.
    """
    grants: list[Grant] = []
    for setting in spec.settings:
        if setting in bucket_settings:
            logical = bucket_settings[setting]
            if (spec.name, logical) not in BUCKET_ACCESS:
                raise KeyError(
                    f"function {spec.name!r} reads {setting}: declare its S3 access in BUCKET_ACCESS "
                    "(infra/constructs/iam/bucket_access.py)"
                )
            for actions, pattern in BUCKET_ACCESS[(spec.name, logical)]:
                grants.append(bucket_grant(actions, pattern, logical, targets.bucket_arns[logical]))
        elif setting == "archive_buckets":
            # The deployer's extra archive buckets: exactly the access the function has on the deployment's own.
            for name, bucket_arn in targets.archive_bucket_arns.items():
                for actions, pattern in BUCKET_ACCESS.get((spec.name, "archive"), []):
                    grants.append(bucket_grant(actions, pattern, f"archive ({name})", bucket_arn))
        elif setting == "launch_template_name":
            grants += launch_grants(
                targets,
                efa="efa_launch_template_name" in spec.settings,
                placement="placement_group_names" in spec.settings,
            )
        elif setting in LAUNCH_REFINEMENTS:
            if "launch_template_name" not in spec.settings:
                raise KeyError(
                    f"function {spec.name!r} reads {setting} but launches nothing (launch_template_name)"
                )
        elif setting in SETTING_GRANTS:
            grants += SETTING_GRANTS[setting](targets)
    for extra in FUNCTION_GRANTS.get(spec.name, ()):
        grants += extra(targets)
    return grants

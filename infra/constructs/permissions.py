"""What each Lambda function may do in AWS: derived from the settings it reads, plus a short table per function.

A function's :attr:`~spotrun.shape.FunctionSpec.settings` say what it touches (``jobs_table`` -> item access to
that table, ``state_machine_arn`` -> starting executions, ...). Some calls follow from the code rather than from
a setting (``release`` terminates instances); :data:`FUNCTION_GRANTS` lists those, and
:data:`infra.constructs.bucket_access.BUCKET_ACCESS` says
which keys of a bucket a function reads or writes. A function that names a bucket setting without an entry in
:data:`BUCKET_ACCESS` stops the synth: every new function declares its S3 access here, on purpose.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aws_cdk import Aws

from infra.constructs.bucket_access import BUCKET_ACCESS, LIST, bucket_grant
from infra.constructs.grant_types import Grant, Targets, arn_of
from infra.constructs.grants_scheduling import manage_schedules, pass_scheduler_role, put_events
from spotrun.model.layout import JOB_ID_TAG
from spotrun.shape import FunctionSpec

INSTANCES = arn_of("ec2", "instance/*")
TAGGED_INSTANCES = {"StringLike": {f"aws:ResourceTag/{JOB_ID_TAG}": "*"}}
NO_RESOURCE_LEVEL = (
    "these EC2 read calls (Describe*) have no resource-level permissions in IAM, so they are granted on '*'"
)


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


def _launch(targets: Targets) -> list[Grant]:
    """Launches from the deployment's launch template and nothing else.

    EC2 authorizes an instant fleet's launches as the caller's ``ec2:RunInstances`` on every resource the launch
    touches (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-fleet-prerequisites.html, "Permissions for
    EC2 Fleet users"). ``ec2:LaunchTemplate`` ties each of them to this template, and
    ``ec2:IsLaunchTemplateResource`` = true refuses a request that overrides a resource the template names, such
    as the image (``ImageId`` is an override of CreateFleet) (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/
    use-launch-templates-to-control-launching-instances.html, "Control the use of launch templates"). The
    subnet is not in the template: each fleet override names one, so it is granted on the deployment's own
    subnets only, and the network interface EC2 creates only in them (``ec2:Subnet``).
    """
    template = arn_of("ec2", f"launch-template/{targets.launch_template_id}")
    this_region = {"StringEquals": {"aws:RequestedRegion": Aws.REGION}}
    from_template = {"ArnLike": {"ec2:LaunchTemplate": template}}
    template_resources = {**from_template, "Bool": {"ec2:IsLaunchTemplateResource": "true"}}
    subnets = tuple(arn_of("ec2", f"subnet/{subnet_id}") for subnet_id in targets.subnet_ids)
    return [
        Grant(
            ("ec2:CreateFleet",),
            (arn_of("ec2", "fleet/*"), template),
            "CreateFleet on fleets (whose ids exist only once EC2 makes them) and on the deployment's launch "
            "template only, in the stack's region; what a fleet may launch is confined by the RunInstances "
            "statements (ec2:LaunchTemplate)",
            this_region,
        ),
        Grant(
            ("ec2:RunInstances",),
            (
                arn_of("ec2", "image/*", account=False),
                arn_of("ec2", "security-group/*"),
                arn_of("ec2", "volume/*"),
                arn_of("ec2", "instance/*"),
            ),
            "the image, security group, volumes and instances of a launch from the deployment's launch template "
            "(ec2:LaunchTemplate), and only as the template names them (ec2:IsLaunchTemplateResource: an "
            "override of the image or security group is refused)",
            template_resources,
        ),
        Grant(
            ("ec2:RunInstances",),
            (template, *subnets),
            "the launch template itself and the deployment's own subnets (each fleet override names one; the "
            "template names none), only for launches from that template",
            from_template,
        ),
        Grant(
            ("ec2:RunInstances",),
            (arn_of("ec2", "network-interface/*"),),
            "the network interface of a launch from the deployment's launch template, only in the deployment's "
            "own subnets (ec2:Subnet)",
            {"ArnLike": {"ec2:LaunchTemplate": template, "ec2:Subnet": list(subnets)}},
        ),
        Grant(
            ("ec2:CreateTags",),
            (INSTANCES, arn_of("ec2", "volume/*")),
            "tags only while launching, and only a launch that carries the job id tag (the tag every later "
            "call is conditioned on)",
            {
                "StringEquals": {"ec2:CreateAction": ["CreateFleet", "RunInstances"]},
                "Null": {f"aws:RequestTag/{JOB_ID_TAG}": "false"},
            },
        ),
        Grant(
            ("ec2:DescribeLaunchTemplateVersions", "ec2:DescribeImages"),
            ("*",),
            NO_RESOURCE_LEVEL,
        ),
        Grant(
            ("iam:PassRole",),
            (targets.instance_role_arn,),
            "hands the instance role to EC2 for the launched instances, and nothing else",
            {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        ),
        Grant(
            ("iam:CreateServiceLinkedRole",),
            (
                arn_of(
                    "iam", "role/aws-service-role/spot.amazonaws.com/AWSServiceRoleForEC2Spot", region=False
                ),
                arn_of(
                    "iam",
                    "role/aws-service-role/ec2fleet.amazonaws.com/AWSServiceRoleForEC2Fleet",
                    region=False,
                ),
            ),
            "the first spot launch in an account creates EC2's own service-linked roles",
            {"StringEquals": {"iam:AWSServiceName": ["spot.amazonaws.com", "ec2fleet.amazonaws.com"]}},
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
    "launch_template_name": _launch,
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
        When the function reads a bucket setting without a :data:`BUCKET_ACCESS` entry for that bucket.
    """
    grants: list[Grant] = []
    for setting in spec.settings:
        if setting in bucket_settings:
            logical = bucket_settings[setting]
            if (spec.name, logical) not in BUCKET_ACCESS:
                raise KeyError(
                    f"function {spec.name!r} reads {setting}: declare its S3 access in BUCKET_ACCESS "
                    "(infra/constructs/bucket_access.py)"
                )
            for actions, pattern in BUCKET_ACCESS[(spec.name, logical)]:
                grants.append(bucket_grant(actions, pattern, logical, targets.bucket_arns[logical]))
        elif setting == "archive_buckets":
            # The deployer's extra archive buckets: exactly the access the function has on the deployment's own.
            for name, bucket_arn in targets.archive_bucket_arns.items():
                for actions, pattern in BUCKET_ACCESS.get((spec.name, "archive"), []):
                    grants.append(bucket_grant(actions, pattern, f"archive ({name})", bucket_arn))
        elif setting in SETTING_GRANTS:
            grants += SETTING_GRANTS[setting](targets)
    for extra in FUNCTION_GRANTS.get(spec.name, ()):
        grants += extra(targets)
    return grants

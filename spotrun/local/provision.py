"""Create the deployment declared in :mod:`spotrun.shape` inside the emulator.

Everything named here comes from the shape (functions, tables, buckets, rules, state machine substitutions,
agent document); the only additions are what AWS itself would already have or CDK would create around them
(a role, a VPC with one subnet per zone and a cluster placement group per subnet, a security group that admits
its own members only, the agent's two launch templates: plain, and with an EFA). The deployer's notification
subscriptions become the rules, topics and API destinations of :func:`spotrun.notifications.notification_rules`
(:mod:`spotrun.local.notifications.subscriptions`).
"""

from __future__ import annotations

import base64
import io
import json
import re
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotrun.aws.settings import Settings
from spotrun.local.capacity.catalog import DEFAULT_ZONES
from spotrun.local.iam import roles
from spotrun.local.notifications.subscriptions import create_subscriptions
from spotrun.local.server import ACCOUNT_ID
from spotrun.model import layout
from spotrun.notifications import Subscription
from spotrun.shape import LOG_RETENTION_DAYS, DeploymentShape, rule_pattern

ClientFactory = Callable[[str], Any]

PREFIX = "spotrun"
STATE_MACHINE_NAME = "spotrun-job"
LAUNCH_TEMPLATE_NAME = "spotrun-agent"
EFA_LAUNCH_TEMPLATE_NAME = "spotrun-agent-efa"
SECURITY_GROUP_NAME = "spotrun-agent"
LOCAL_AMI_ID = "ami-0123456789abcdef0"  # moto does not validate image ids; none is ever booted
VPC_CIDR = "10.42.0.0/16"
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_]+)\}")


def function_name(logical: str) -> str:
    """Deployed name of the function declared as ``logical``."""
    return f"{PREFIX}-{logical}"


def table_name(logical: str) -> str:
    """Deployed name of the table declared as ``logical``."""
    return f"{PREFIX}-{logical}"


def bucket_name(logical: str) -> str:
    """Local name of the bucket declared as ``logical``."""
    return f"{PREFIX}-{logical}-local"


def rule_name(logical: str) -> str:
    """Deployed name of the rule declared as ``logical``."""
    return f"{PREFIX}-{logical}"


def substitute(definition: str, values: dict[str, str]) -> str:
    """Fill every ``${Placeholder}`` of an ASL document.

    Raises
    ------
    ValueError
        When the document holds a placeholder without a value: the shape and the ASL file have drifted.
    """
    missing = sorted({name for name in _PLACEHOLDER.findall(definition) if name not in values})
    if missing:
        raise ValueError(f"state machine placeholders without a value in the shape: {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], definition)


@dataclass
class Deployment:
    """Names and ARNs of what :func:`provision` created."""

    settings: Settings
    function_names: dict[str, str] = field(default_factory=dict)  # logical -> deployed
    function_arns: dict[str, str] = field(default_factory=dict)  # logical -> ARN
    bucket_names: dict[str, str] = field(default_factory=dict)
    table_names: dict[str, str] = field(default_factory=dict)
    rule_names: dict[str, str] = field(default_factory=dict)
    bus_names: dict[str, str] = field(default_factory=dict)
    state_machine_arn: str = ""
    vpc_id: str = ""
    subnet_ids: tuple[str, ...] = ()
    placement_group_names: tuple[str, ...] = ()  # one per subnet, in the order of subnet_ids
    security_group_id: str = ""
    role_arn: str = ""
    # Notification rule (logical, "notify-1-email") -> its target's ARN (a topic or an API destination).
    notification_targets: dict[str, str] = field(default_factory=dict)
    notification_dlq_url: str = ""


def _dummy_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(
            "README.txt", "The embedded runtime runs handlers in-process; this package is never used.\n"
        )
    return buffer.getvalue()


def provision(
    client: ClientFactory,
    shape: DeploymentShape,
    state_machine_file: Path,
    time_scale: float,
    region: str = "us-east-1",
    zones: Sequence[str] = DEFAULT_ZONES,
    secret_references: tuple[str, ...] | None = None,
    notifications: Sequence[Subscription] = (),
) -> Deployment:
    """Create every resource of ``shape`` through the emulator's API.

    Parameters
    ----------
    client
        ``service name -> boto3 client`` on the emulator's endpoint.
    shape
        The deployment's declaration.
    state_machine_file
        ASL document whose placeholders ``shape.state_machine_functions`` fills.
    time_scale
        Carried into the settings.
    region, zones
        Where the VPC's subnets go (one per zone).
    secret_references
        The deployment's allowed ``training.secrets`` references (the CDK option); None:
        :func:`local_secret_references`, the secrets and parameters named ``spotrun/...`` of the region.
    notifications
        The deployer's subscriptions (:mod:`spotrun.notifications`); a ``webhook_secret`` is read from the
        emulator's Secrets Manager, as CloudFormation resolves it on AWS.

    Returns
    -------
    Deployment
        Every name and ARN, and the :class:`~spotrun.aws.settings.Settings` of the deployment.
    """
    dep = Deployment(settings=Settings())
    dep.bucket_names = {b.logical_name: bucket_name(b.logical_name) for b in shape.buckets}
    dep.table_names = {t.logical_name: table_name(t.logical_name) for t in shape.tables}
    _buckets(client("s3"), shape, dep)
    _tables(client("dynamodb"), shape, dep)
    dep.role_arn = roles.functions_role(client("iam"))
    if secret_references is None:
        secret_references = local_secret_references(region)
    log_group_arn = _log_group(client("logs"), dep.bucket_names["jobs"], region)
    job_access_role_arn = roles.job_access_role(
        client("iam"), dep.bucket_names["jobs"], dep.role_arn, log_group_arn
    )
    roles.secret_ceiling(client("iam"), secret_references)
    roles.instance_role(client("iam"), secret_references)
    _functions(client("lambda"), shape, dep)
    definition = substitute(
        state_machine_file.read_text(),
        {placeholder: dep.function_arns[name] for placeholder, name in shape.state_machine_functions.items()},
    )
    dep.state_machine_arn = client("stepfunctions").create_state_machine(
        name=STATE_MACHINE_NAME, definition=definition, roleArn=dep.role_arn, type="STANDARD"
    )["stateMachineArn"]
    scheduling = _buses_and_schedules(client, shape, dep)
    _rules(client("events"), client("lambda"), shape, dep)
    if notifications:
        bus = dep.bus_names[shape.notifications_bus]
        subscribed = create_subscriptions(client, notifications, bus, dep.role_arn, rule_name)
        dep.notification_targets, dep.notification_dlq_url = subscribed.targets, subscribed.dlq_url
    client("ssm").create_document(
        Name=shape.agent_document_name,
        Content=json.dumps(shape.agent_document()),
        DocumentType="Command",
        DocumentFormat="JSON",
    )
    _network(client("ec2"), zones, dep)
    values: dict[str, Any] = {
        "region": region,
        "state_machine_arn": dep.state_machine_arn,
        "agent_document_name": shape.agent_document_name,
        "launch_template_name": LAUNCH_TEMPLATE_NAME,
        "efa_launch_template_name": EFA_LAUNCH_TEMPLATE_NAME,
        "instance_role_name": roles.INSTANCE_ROLE_NAME,
        "job_access_role_arn": job_access_role_arn,
        "subnet_ids": dep.subnet_ids,
        "placement_group_names": dep.placement_group_names,
        "time_scale": time_scale,
        "reference_patterns": secret_references,
        **scheduling,
    }
    # Settings fields follow the shape's logical names: table "jobs" -> jobs_table, bucket "archive" -> ...
    for logical, name in dep.table_names.items():
        if f"{logical}_table" in Settings.model_fields:
            values[f"{logical}_table"] = name
    for logical, name in dep.bucket_names.items():
        if f"{logical}_bucket" in Settings.model_fields:
            values[f"{logical}_bucket"] = name
    dep.settings = Settings(**values)
    return dep


def _buckets(s3: Any, shape: DeploymentShape, dep: Deployment) -> None:
    for spec in shape.buckets:
        name = dep.bucket_names[spec.logical_name]
        s3.create_bucket(Bucket=name)
        s3.put_public_access_block(
            Bucket=name,
            PublicAccessBlockConfiguration={
                "BlockPublicAcls": True,
                "IgnorePublicAcls": True,
                "BlockPublicPolicy": True,
                "RestrictPublicBuckets": True,
            },
        )
        s3.put_bucket_encryption(
            Bucket=name,
            ServerSideEncryptionConfiguration={
                "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
            },
        )
        if spec.versioned:
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        if spec.eventbridge_notifications:
            s3.put_bucket_notification_configuration(
                Bucket=name, NotificationConfiguration={"EventBridgeConfiguration": {}}
            )


def _tables(dynamodb: Any, shape: DeploymentShape, dep: Deployment) -> None:
    for spec in shape.tables:
        name = dep.table_names[spec.logical_name]
        keys = [spec.partition_key] + ([spec.sort_key] if spec.sort_key else [])
        indexes = []
        for index_name, partition, sort in spec.global_indexes:
            schema = [{"AttributeName": partition, "KeyType": "HASH"}]
            schema += [{"AttributeName": sort, "KeyType": "RANGE"}] if sort else []
            keys += [partition] + ([sort] if sort else [])
            indexes.append(
                {"IndexName": index_name, "KeySchema": schema, "Projection": {"ProjectionType": "ALL"}}
            )
        schema = [{"AttributeName": spec.partition_key, "KeyType": "HASH"}]
        schema += [{"AttributeName": spec.sort_key, "KeyType": "RANGE"}] if spec.sort_key else []
        dynamodb.create_table(
            TableName=name,
            BillingMode="PAY_PER_REQUEST",
            KeySchema=schema,
            AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k in dict.fromkeys(keys)],
            **({"GlobalSecondaryIndexes": indexes} if indexes else {}),
        )
        if spec.ttl_attribute:
            dynamodb.update_time_to_live(
                TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute}
            )


def local_secret_references(region: str) -> tuple[str, ...]:
    """The emulator's default ``secret_references``: every secret and parameter whose name starts ``spotrun/``."""
    return (
        f"arn:aws:secretsmanager:{region}:{ACCOUNT_ID}:secret:spotrun/*",
        f"arn:aws:ssm:{region}:{ACCOUNT_ID}:parameter/spotrun/*",
    )


def _log_group(logs: Any, jobs_bucket: str, region: str) -> str:
    """The deployment's log group of training logs, as infra.constructs.data.storage makes it; returns its ARN."""
    name = layout.log_group(jobs_bucket)
    logs.create_log_group(logGroupName=name)
    logs.put_retention_policy(logGroupName=name, retentionInDays=LOG_RETENTION_DAYS)
    return f"arn:aws:logs:{region}:{ACCOUNT_ID}:log-group:{name}"


def _functions(lambda_: Any, shape: DeploymentShape, dep: Deployment) -> None:
    package = _dummy_zip()
    for spec in shape.functions:
        name = function_name(spec.name)
        created = lambda_.create_function(
            FunctionName=name,
            Runtime="python3.12",
            Role=dep.role_arn,
            Handler=spec.handler,
            Code={"ZipFile": package},
            Description=spec.description,
            Timeout=spec.timeout_seconds,
            MemorySize=spec.memory_mb,
        )
        dep.function_names[spec.name] = name
        dep.function_arns[spec.name] = created["FunctionArn"]


def _rules(events: Any, lambda_: Any, shape: DeploymentShape, dep: Deployment) -> None:
    for spec in shape.rules:
        name = rule_name(spec.name)
        # A rule on one of spotrun's buses (its bus created first); the default bus otherwise.
        bus = {} if spec.bus is None else {"EventBusName": dep.bus_names[spec.bus]}
        arn = events.put_rule(
            Name=name,
            EventPattern=json.dumps(rule_pattern(spec, dep.bucket_names)),
            State="ENABLED",
            Description=spec.description,
            **bus,
        )["RuleArn"]
        events.put_targets(
            Rule=name,
            Targets=[{"Id": spec.target_function, "Arn": dep.function_arns[spec.target_function]}],
            **bus,
        )
        lambda_.add_permission(
            FunctionName=dep.function_names[spec.target_function],
            StatementId=f"events-{spec.name}",
            Action="lambda:InvokeFunction",
            Principal="events.amazonaws.com",
            SourceArn=arn,
        )
        dep.rule_names[spec.name] = name


def _buses_and_schedules(client: ClientFactory, shape: DeploymentShape, dep: Deployment) -> dict[str, str]:
    """Create each bus and the schedule group; return the settings that name them.

    The role Scheduler would assume is the emulator's one execution role: moto checks no permission.
    """
    dep.bus_names = {spec.logical_name: f"{PREFIX}-{spec.logical_name}" for spec in shape.buses}
    for bus in dep.bus_names.values():
        client("events").create_event_bus(Name=bus)
    values = {spec.setting: dep.bus_names[spec.logical_name] for spec in shape.buses}
    if shape.schedule_target not in dep.function_arns:
        return values  # a smaller shape (some tests) without scheduled retraining
    client("scheduler").create_schedule_group(Name=shape.schedule_group)
    return {
        **values,
        "schedule_group": shape.schedule_group,
        "scheduler_role_arn": dep.role_arn,
        "scheduled_run_arn": dep.function_arns[shape.schedule_target],
    }


def placement_group_name(zone: str) -> str:
    """Local name of the cluster placement group of the subnet in ``zone``."""
    return f"{PREFIX}-cluster-{zone}"


def _network(ec2: Any, zones: Sequence[str], dep: Deployment) -> None:
    dep.vpc_id = ec2.create_vpc(CidrBlock=VPC_CIDR)["Vpc"]["VpcId"]
    subnets, groups = [], []
    for index, zone in enumerate(zones):
        subnet = ec2.create_subnet(VpcId=dep.vpc_id, CidrBlock=f"10.42.{index}.0/24", AvailabilityZone=zone)
        subnets.append(subnet["Subnet"]["SubnetId"])
        # A cluster placement group lives in one zone
        # (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html): one per subnet, as
        # infra.constructs.compute.network makes them, so a group's nodes share one zone's close network.
        groups.append(
            ec2.create_placement_group(GroupName=placement_group_name(zone), Strategy="cluster")[
                "PlacementGroup"
            ]["GroupName"]
        )
    dep.subnet_ids = tuple(subnets)
    dep.placement_group_names = tuple(groups)
    # Nothing from outside: the control plane reaches instances through SSM. Everything from the group's own
    # members: a multi-node job's nodes reach each other (torch's rendezvous, NCCL), which an EFA also needs
    # (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html#efa-start-security).
    dep.security_group_id = ec2.create_security_group(
        GroupName=SECURITY_GROUP_NAME,
        Description="spotrun GPU instances (inbound from each other only)",
        VpcId=dep.vpc_id,
    )["GroupId"]
    ec2.authorize_security_group_ingress(
        GroupId=dep.security_group_id,
        IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": dep.security_group_id}]}],
    )
    ec2.create_launch_template(
        LaunchTemplateName=LAUNCH_TEMPLATE_NAME,
        LaunchTemplateData={**_template_data(), "SecurityGroupIds": [dep.security_group_id]},
    )
    # The same instances with an EFA as their one network interface; the group moves onto the interface, since
    # a template naming interfaces may not also name instance security groups.
    efa_interface = {"DeviceIndex": 0, "InterfaceType": "efa", "Groups": [dep.security_group_id]}
    ec2.create_launch_template(
        LaunchTemplateName=EFA_LAUNCH_TEMPLATE_NAME,
        LaunchTemplateData={**_template_data(), "NetworkInterfaces": [efa_interface]},
    )


def _template_data() -> dict[str, Any]:
    """What the agent's two launch templates share: image, IMDSv2, user data, tags."""
    user_data = "#!/bin/bash\n# The embedded runtime starts the agent itself; on EC2 this installs it.\n"
    return {
        "ImageId": LOCAL_AMI_ID,
        "MetadataOptions": {
            "HttpTokens": "required",
            "HttpEndpoint": "enabled",
            "HttpPutResponseHopLimit": 2,
        },
        "UserData": base64.b64encode(user_data.encode()).decode(),
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": [{"Key": "spotrun:managed", "Value": "true"}]}
        ],
    }

"""The one spotrun stack: composes the capability constructs and publishes what the CLI needs as outputs."""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Stack, Tags
from constructs import Construct

from infra.constructs.compute.instances import Instances
from infra.constructs.compute.network import Network
from infra.constructs.control_plane.api import RestApi
from infra.constructs.control_plane.events import Buses, Rules
from infra.constructs.control_plane.functions import Functions
from infra.constructs.control_plane.schedules import ScheduleGroup
from infra.constructs.control_plane.workflow import Workflow
from infra.constructs.data.storage import Storage
from infra.constructs.data.training_logs import TrainingLogs
from infra.constructs.iam.job_access import JobAccess, deny_to_instances
from infra.constructs.iam.permissions import Targets
from infra.constructs.monitoring import Monitoring
from infra.constructs.notifications import Notifications
from infra.options import StackOptions
from spotrun.aws.settings import Settings
from spotrun.model.agent_protocol.api_paths import AGENT_CREDENTIALS_PATH
from spotrun.shape import SERVICE_NAME, STATE_MACHINE_FILE, DeploymentShape


def output_key(setting: str) -> str:
    """Stack output that carries the setting ``setting`` (``jobs_table`` -> ``JobsTable``)."""
    return "".join(part.capitalize() for part in setting.split("_"))


class SpotrunStack(Stack):
    """Everything spotrun needs in one account and region, built from ``shape``.

    Attributes
    ----------
    settings
        The deployment's :class:`~spotrun.aws.settings.Settings` (values are CloudFormation tokens); each field is
        also a stack output named by :func:`output_key`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        shape: DeploymentShape,
        options: StackOptions,
        **kwargs: Any,
    ):
        super().__init__(scope, construct_id, **kwargs)
        Tags.of(self).add("project", SERVICE_NAME)

        storage = Storage(self, "Storage", shape=shape, options=options)
        network = Network(self, "Network", options=options)
        jobs_bucket = storage.buckets["jobs"]
        functions = Functions(self, "Functions", shape=shape, layer_version=options.powertools_layer_version)
        workflow = Workflow(
            self, "Workflow", shape=shape, definition_file=STATE_MACHINE_FILE, functions=functions.functions
        )
        api = RestApi(
            self,
            "Api",
            function=functions.functions[shape.api_function],
            subtrees={path: functions.functions[name] for path, name in shape.api_routes},
        )
        training_logs = TrainingLogs(self, "TrainingLogs", jobs_bucket=jobs_bucket)
        job_access = JobAccess(
            self,
            "JobAccess",
            jobs_bucket=jobs_bucket,
            training_logs_arn=training_logs.arn,
            data_buckets=options.data_buckets,
            secret_references=options.secret_references,
            # Only the function that serves the credentials route may assume it.
            trusted=functions.roles[shape.api_function_for(AGENT_CREDENTIALS_PATH)],
        )
        # After the API: the user data names its credentials route (the RestApi's id, not its deployment).
        instances = Instances(
            self,
            "Instances",
            options=options,
            security_group=network.security_group,
            shape=shape,
            credentials_url=api.agent_credentials_url,
        )
        instances.grant_agent_routes([api.agent_reports_arn, api.agent_credentials_arn])
        deny_to_instances(instances.role, options.secret_references)
        bucket_names = {logical: bucket.bucket_name for logical, bucket in storage.buckets.items()}
        bus_construct = Buses(self, "Buses", shape=shape)
        buses = bus_construct.buses
        Rules(
            self,
            "Rules",
            shape=shape,
            bucket_names=bucket_names,
            functions=functions.functions,
            buses=bus_construct.by_name,
        )
        Notifications(
            self,
            "Notifications",
            subscribers=options.notifications,
            bus=bus_construct.by_name[shape.notifications_bus],
        )
        schedules = ScheduleGroup(
            self, "Schedules", shape=shape, target=functions.functions[shape.schedule_target]
        )

        placement_group_names = tuple(group.placement_group_name for group in network.placement_groups)
        values: dict[str, Any] = {
            "region": self.region,
            "state_machine_arn": workflow.state_machine.state_machine_arn,
            "agent_document_name": shape.agent_document_name,
            "launch_template_name": instances.launch_template_name,
            "efa_launch_template_name": instances.efa_launch_template_name,
            "subnet_ids": tuple(subnet.subnet_id for subnet in network.subnets),
            # One per subnet, in the subnets' order (infra.constructs.compute.network).
            "placement_group_names": placement_group_names,
            **{setting: bus.event_bus_name for setting, bus in buses.items()},
            "schedule_group": schedules.group_name,
            "scheduler_role_arn": schedules.role.role_arn,
            "scheduled_run_arn": schedules.target.function_arn,
            "archive_buckets": options.archive_buckets,
            "reference_patterns": options.secret_references,
            "agent_report_url": api.agent_reports_url,
            "instance_role_name": instances.role.role_name,
            "job_access_role_arn": job_access.role.role_arn,
        }
        # Settings fields follow the shape's logical names, as in the emulator: table "jobs" -> jobs_table.
        bucket_settings = {
            f"{name}_bucket": name for name in storage.buckets if f"{name}_bucket" in Settings.model_fields
        }
        values |= {setting: storage.buckets[name].bucket_name for setting, name in bucket_settings.items()}
        values |= {
            f"{name}_table": table.table_name
            for name, table in storage.tables.items()
            if f"{name}_table" in Settings.model_fields
        }
        self.settings = Settings(**values)
        functions.configure(
            self.settings,
            Targets(
                table_arns={name: table.table_arn for name, table in storage.tables.items()},
                tables_with_indexes=frozenset(
                    spec.logical_name for spec in shape.tables if spec.global_indexes
                ),
                bucket_arns={name: bucket.bucket_arn for name, bucket in storage.buckets.items()},
                state_machine_arn=workflow.state_machine.state_machine_arn,
                state_machine_name=workflow.state_machine.state_machine_name,
                agent_document_name=shape.agent_document_name,
                launch_template_id=instances.launch_template.launch_template_id or "",
                efa_launch_template_id=instances.efa_launch_template.launch_template_id or "",
                placement_group_names=placement_group_names,
                instance_role_arn=instances.role.role_arn,
                job_access_role_arn=job_access.role.role_arn,
                training_logs_arn=training_logs.arn,
                subnet_ids=tuple(subnet.subnet_id for subnet in network.subnets),
                bus_arns={setting: bus.event_bus_arn for setting, bus in buses.items()},
                schedule_group=schedules.group_name,
                scheduler_role_arn=schedules.role.role_arn,
                archive_bucket_arns={
                    name: f"arn:{Aws.PARTITION}:s3:::{name}" for name in options.archive_buckets
                },
                data_bucket_arns={name: f"arn:{Aws.PARTITION}:s3:::{name}" for name in options.data_buckets},
            ),
            bucket_settings,
        )
        monitoring = Monitoring(
            self,
            "Monitoring",
            options=options,
            state_machine=workflow.state_machine,
            workflow_logs=workflow.log_group,
            functions=functions.functions,
        )
        self._outputs(monitoring)
        CfnOutput(self, "ApiUrl", value=api.url, description="spotrun REST API (IAM auth: sign with SigV4)")

    def _outputs(self, monitoring: Monitoring) -> None:
        for setting, value in self.settings.to_env().items():
            name = setting.removeprefix("SPOTRUN_").lower()
            CfnOutput(self, output_key(name), value=value, description=f"spotrun setting {name}")
        CfnOutput(self, "AlarmTopicArn", value=monitoring.topic.topic_arn, description="Alarm notifications")
        CfnOutput(
            self,
            "DashboardName",
            value=monitoring.dashboard.dashboard_name,
            description="CloudWatch dashboard",
        )

"""Alarms, a dashboard and the encrypted, TLS-only topic the alarms notify.

GPU alarms read what the agent publishes: namespace ``spotrun``, metrics ``GPUUtilization`` and
``GPUMemoryUtilization`` (percent), dimension ``InstanceId``. Instance ids change with every attempt, so the
alarms aggregate over all instances with a CloudWatch Metrics Insights query (``SELECT MIN(...) FROM
SCHEMA(spotrun, InstanceId)``): the least busy GPU instance for low utilization, the fullest for memory.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.options import StackOptions
from spotrun.shape import METRICS_NAMESPACE

GPU_UTILIZATION = "GPUUtilization"
GPU_MEMORY = "GPUMemoryUtilization"
INSTANCE_DIMENSION = "InstanceId"
MAX_ALARM_METRICS = 10
FIVE_MINUTES = Duration.minutes(5)


def gpu_query(aggregate: str, metric: str) -> str:
    """Metrics Insights query folding ``metric`` of every instance into one series."""
    # Not SQL run anywhere: a CloudWatch query assembled from this module's constants only.
    return f"SELECT {aggregate}({metric}) FROM SCHEMA({METRICS_NAMESPACE}, {INSTANCE_DIMENSION})"  # noqa: S608


class Monitoring(Construct):
    """The alarm topic, the alarms and the dashboard.

    Attributes
    ----------
    topic
        Where every alarm (and its return to OK) is sent.
    alarms
        Alarm purpose -> alarm.
    dashboard
        The operations dashboard.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        options: StackOptions,
        state_machine: sfn.StateMachine,
        workflow_logs: logs.ILogGroup,
        functions: Mapping[str, lambda_.IFunction],
    ):
        super().__init__(scope, construct_id)
        self.topic = self._topic(options)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        self._job_alarms(state_machine, workflow_logs)
        self._gpu_alarms(options)
        # An alarm's math takes at most 10 metrics: one alarm per 10 functions.
        named = list(functions.values())
        errors: list[cloudwatch.IMetric] = []
        for first in range(0, len(named), MAX_ALARM_METRICS):
            chunk = named[first : first + MAX_ALARM_METRICS]
            errors.append(
                cloudwatch.MathExpression(
                    expression=" + ".join(f"FILL(e{first + i}, 0)" for i in range(len(chunk))),
                    using_metrics={
                        f"e{first + i}": fn.metric_errors(period=FIVE_MINUTES) for i, fn in enumerate(chunk)
                    },
                    label="Function errors" if first == 0 else f"Function errors ({first + 1}-)",
                    period=FIVE_MINUTES,
                )
            )
            suffix = "" if first == 0 else str(first // MAX_ALARM_METRICS + 1)
            self._alarm(
                f"FunctionErrors{suffix}",
                errors[-1],
                1,
                "A spotrun Lambda function failed (after its retries).",
            )
        self.dashboard = self._dashboard(state_machine, functions, errors)

    def _topic(self, options: StackOptions) -> sns.Topic:
        key = kms.Key(self, "TopicKey", enable_key_rotation=True, description="spotrun alarm topic")
        # CloudWatch publishes to the encrypted topic, so it needs the key (AWS's managed SNS key would refuse).
        key.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                resources=["*"],
                conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}},
            )
        )
        topic = sns.Topic(self, "AlarmTopic", display_name="spotrun alarms", master_key=key, enforce_ssl=True)
        if options.alarm_email:
            topic.add_subscription(subscriptions.EmailSubscription(options.alarm_email))
        return topic

    def _alarm(
        self,
        name: str,
        metric: cloudwatch.IMetric,
        threshold: float,
        description: str,
        *,
        comparison: cloudwatch.ComparisonOperator = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        periods: int = 1,
    ) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            name,
            metric=metric,
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=periods,
            datapoints_to_alarm=periods,
            # No data means no job or no instance: nothing is wrong.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        alarm.add_alarm_action(actions.SnsAction(self.topic))
        alarm.add_ok_action(actions.SnsAction(self.topic))
        self.alarms[name] = alarm
        return alarm

    def _job_alarms(self, state_machine: sfn.StateMachine, workflow_logs: logs.ILogGroup) -> None:
        failed = cloudwatch.MathExpression(
            expression="FILL(failed, 0) + FILL(timedout, 0) + FILL(aborted, 0)",
            using_metrics={
                "failed": state_machine.metric_failed(period=FIVE_MINUTES),
                "timedout": state_machine.metric_timed_out(period=FIVE_MINUTES),
                "aborted": state_machine.metric_aborted(period=FIVE_MINUTES),
            },
            label="Jobs failed",
            period=FIVE_MINUTES,
        )
        self._alarm("JobsFailed", failed, 1, "A spotrun job ended FAILED, timed out or was stopped.")
        # A task that outlives its heartbeat or timeout is an execution stuck in a state: its instance or agent
        # stopped reporting. The workflow log says so with a TaskTimedOut event.
        stuck = workflow_logs.add_metric_filter(
            "TaskTimeouts",
            filter_pattern=logs.FilterPattern.string_value("$.type", "=", "TaskTimedOut"),
            metric_namespace=METRICS_NAMESPACE,
            metric_name="WorkflowTaskTimeouts",
            metric_value="1",
            default_value=0,
        )
        self._alarm(
            "ExecutionsStuck",
            stuck.metric(statistic="Sum", period=FIVE_MINUTES),
            1,
            "A job sat in a state past its heartbeat or timeout (silent instance or agent).",
        )
        # Waiting for capacity is normal for a while; an hour of it (12 waits at the default 5 minutes) is not.
        waits = workflow_logs.add_metric_filter(
            "CapacityWaits",
            filter_pattern=logs.FilterPattern.all(
                logs.FilterPattern.string_value("$.type", "=", "WaitStateEntered"),
                logs.FilterPattern.string_value("$.details.name", "=", "WaitForCapacity"),
            ),
            metric_namespace=METRICS_NAMESPACE,
            metric_name="CapacityWaits",
            metric_value="1",
            default_value=0,
        )
        self._alarm(
            "WaitingForCapacity",
            waits.metric(statistic="Sum", period=Duration.hours(1)),
            12,
            "Jobs have been waiting for spot capacity for about an hour: widen instance types or zones.",
        )

    def _gpu_alarms(self, options: StackOptions) -> None:
        low = cloudwatch.MathExpression(
            expression=gpu_query("MIN", GPU_UTILIZATION),
            label="Least busy GPU instance (%)",
            period=FIVE_MINUTES,
        )
        self._alarm(
            "GpuUnderused",
            low,
            options.gpu_low_utilization_percent,
            f"A GPU instance ran below {options.gpu_low_utilization_percent:g} % utilization for 15 minutes: "
            "paying for idle GPUs (input pipeline bound, or stuck).",
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            periods=3,
        )
        high = cloudwatch.MathExpression(
            expression=gpu_query("MAX", GPU_MEMORY), label="Fullest GPU memory (%)", period=FIVE_MINUTES
        )
        self._alarm(
            "GpuMemoryHigh",
            high,
            options.gpu_memory_high_percent,
            f"GPU memory above {options.gpu_memory_high_percent:g} % for 10 minutes: an out-of-memory is near.",
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            periods=2,
        )

    def _dashboard(
        self,
        state_machine: sfn.StateMachine,
        functions: Mapping[str, lambda_.IFunction],
        errors: list[cloudwatch.IMetric],
    ) -> cloudwatch.Dashboard:
        dashboard = cloudwatch.Dashboard(self, "Dashboard", default_interval=Duration.days(1))
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Jobs",
                left=[
                    state_machine.metric_started(period=FIVE_MINUTES, label="started"),
                    state_machine.metric_succeeded(period=FIVE_MINUTES, label="succeeded"),
                    state_machine.metric_failed(period=FIVE_MINUTES, label="failed"),
                ],
                width=12,
            ),
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=12),
            cloudwatch.GraphWidget(
                title="GPU utilization and memory (%)",
                left=[
                    cloudwatch.MathExpression(
                        expression=gpu_query("AVG", GPU_UTILIZATION), label="utilization, mean"
                    ),
                    cloudwatch.MathExpression(
                        expression=gpu_query("MIN", GPU_UTILIZATION), label="utilization, min"
                    ),
                    cloudwatch.MathExpression(expression=gpu_query("MAX", GPU_MEMORY), label="memory, max"),
                ],
                left_y_axis=cloudwatch.YAxisProps(min=0, max=100),
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Function duration (p90, ms) and errors",
                left=[fn.metric_duration(statistic="p90", label=name) for name, fn in functions.items()],
                right=errors,
                width=12,
            ),
        )
        return dashboard

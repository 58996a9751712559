"""Scheduled retraining: the EventBridge Scheduler group and the role its schedules assume.

Schedules themselves are made at run time by the API function (one per manifest with a ``schedule``); the
stack only provides their group and a role that may invoke the ``scheduled_run`` function and nothing else.
"""

from __future__ import annotations

from aws_cdk import Aws
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from spotrun.shape import DeploymentShape


class ScheduleGroup(Construct):
    """The schedule group and the invocation role.

    Attributes
    ----------
    group_name
        Name of the schedule group (the shape's).
    role
        The role Scheduler assumes to invoke ``target``.
    target
        The function every schedule invokes.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, shape: DeploymentShape, target: lambda_.IFunction
    ):
        super().__init__(scope, construct_id)
        group = scheduler.CfnScheduleGroup(self, "Group", name=shape.schedule_group)
        self.group_name = shape.schedule_group
        self.group_arn = group.attr_arn
        self.target = target
        self.role = iam.Role(
            self,
            "InvokeRole",
            description="Assumed by EventBridge Scheduler to invoke the scheduled_run function only.",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                    "ArnLike": {
                        "aws:SourceArn": f"arn:{Aws.PARTITION}:scheduler:{Aws.REGION}:{Aws.ACCOUNT_ID}:"
                        f"schedule/{shape.schedule_group}/*"
                    },
                },
            ),
        )
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[target.function_arn])
        )

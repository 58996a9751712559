"""Grants implied by the event bus and the schedule settings (see :mod:`infra.constructs.iam.permissions`)."""

from __future__ import annotations

from infra.constructs.iam.grant_types import Grant, Targets, arn_of


def put_events(targets: Targets) -> list[Grant]:
    return [
        Grant(
            ("events:PutEvents",),
            tuple(targets.bus_arns.values()),
            "publishes job status changes on the deployment's own bus only",
        )
    ]


def manage_schedules(targets: Targets) -> list[Grant]:
    return [
        Grant(
            ("scheduler:CreateSchedule", "scheduler:DeleteSchedule", "scheduler:GetSchedule"),
            (arn_of("scheduler", f"schedule/{targets.schedule_group}/*"),),
            "creates, reads and deletes schedules of spotrun's own schedule group only",
        ),
        Grant(
            ("scheduler:ListSchedules",),
            ("*",),
            "ListSchedules has no resource-level permissions in IAM; the adapter lists spotrun's group only",
        ),
    ]


def pass_scheduler_role(targets: Targets) -> list[Grant]:
    return [
        Grant(
            ("iam:PassRole",),
            (targets.scheduler_role_arn,),
            "hands schedules the role that may only invoke scheduled_run, to Scheduler only",
            {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
        )
    ]

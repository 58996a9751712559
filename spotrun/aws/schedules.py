"""boto3 adapters for scheduled retraining: EventBridge Scheduler and the schedule items of the jobs table."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from spotrun.aws.adapters import client, dynamodb_table
from spotrun.control.schedules.run_records import RunRecord


class SchedulerSchedules:
    """:class:`spotrun.control.ports.Schedules` on one EventBridge Scheduler group and one target function."""

    def __init__(self, group: str, target_arn: str, role_arn: str, region: str):
        self._group, self._target, self._role = group, target_arn, role_arn
        self._scheduler = client("scheduler", region)

    def create(self, name: str, expression: str, timezone: str, payload: dict[str, Any]) -> bool:
        try:
            self._scheduler.create_schedule(
                Name=name,
                GroupName=self._group,
                ScheduleExpression=expression,
                ScheduleExpressionTimezone=timezone,
                FlexibleTimeWindow={"Mode": "OFF"},
                Target={"Arn": self._target, "RoleArn": self._role, "Input": json.dumps(payload)},
                State="ENABLED",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConflictException":
                return False
            raise
        return True

    def list(self) -> list[dict[str, Any]]:
        found = []
        for page in self._scheduler.get_paginator("list_schedules").paginate(GroupName=self._group):
            for summary in page.get("Schedules", []):
                detail = self._scheduler.get_schedule(Name=summary["Name"], GroupName=self._group)
                found.append(
                    {
                        "name": detail["Name"],
                        "expression": detail["ScheduleExpression"],
                        "timezone": detail.get("ScheduleExpressionTimezone") or "UTC",
                        "state": detail.get("State", "ENABLED"),
                    }
                )
        return sorted(found, key=lambda item: item["name"])

    def delete(self, name: str) -> bool:
        try:
            self._scheduler.delete_schedule(Name=name, GroupName=self._group)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ResourceNotFoundException":
                return False
            raise
        return True


class DynamoRunRecords:
    """:class:`spotrun.control.schedules.firing.RunRecords` in the jobs table.

    ``pk = SCHEDULE#<name>``: ``sk = RUN#<scheduled time>`` per firing (a job started, or a skip with its
    reason), and ``sk = LAST_SUCCESS`` with the input fingerprint of the last run that succeeded.
    """

    def __init__(self, table_name: str, region: str):
        self._table = dynamodb_table(table_name, region)

    def add_run(self, run: RunRecord) -> bool:
        try:
            self._table.put_item(
                Item={
                    "pk": f"SCHEDULE#{run.schedule}",
                    "sk": f"RUN#{run.scheduled_time}",
                    "doc": run.model_dump_json(),
                },
                ConditionExpression="attribute_not_exists(pk)",
            )
        except self._table.meta.client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def get_run(self, schedule: str, scheduled_time: str) -> RunRecord | None:
        item = self._table.get_item(
            Key={"pk": f"SCHEDULE#{schedule}", "sk": f"RUN#{scheduled_time}"}, ConsistentRead=True
        ).get("Item")
        return None if item is None else RunRecord.model_validate_json(item["doc"])

    def runs(self, schedule: str) -> list[RunRecord]:
        query: dict[str, Any] = {
            "KeyConditionExpression": "pk = :p AND begins_with(sk, :r)",
            "ExpressionAttributeValues": {":p": f"SCHEDULE#{schedule}", ":r": "RUN#"},
            "ScanIndexForward": False,
        }
        items: list[dict[str, Any]] = []
        while True:
            page = self._table.query(**query)
            items += page.get("Items", [])
            if "LastEvaluatedKey" not in page:
                break
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return [RunRecord.model_validate_json(item["doc"]) for item in items]

    def last_success(self, schedule: str) -> RunRecord | None:
        item = self._table.get_item(
            Key={"pk": f"SCHEDULE#{schedule}", "sk": "LAST_SUCCESS"}, ConsistentRead=True
        ).get("Item")
        return None if item is None else RunRecord.model_validate_json(item["doc"])

    def set_last_success(self, run: RunRecord) -> None:
        # A late success of an older run never replaces a newer one.
        try:
            self._table.put_item(
                Item={
                    "pk": f"SCHEDULE#{run.schedule}",
                    "sk": "LAST_SUCCESS",
                    "scheduled_time": run.scheduled_time,
                    "doc": run.model_dump_json(),
                },
                ConditionExpression="attribute_not_exists(pk) OR scheduled_time < :t",
                ExpressionAttributeValues={":t": run.scheduled_time},
            )
        except self._table.meta.client.exceptions.ConditionalCheckFailedException:
            return

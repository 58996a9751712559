"""What the agent route's tests share: a local runtime whose workflow parks on a task token, and its clock."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from spotrun.local.runtime import LocalRuntime
from spotrun.shape import SHAPE, DeploymentShape, FunctionSpec

SHAPE_UNDER_TEST = DeploymentShape(
    functions=(
        FunctionSpec("park", "fixtures_handlers.park", "Keeps the task token."),
        SHAPE.function("api"),
        SHAPE.function("agent_api"),
    ),
    tables=SHAPE.tables,
    buckets=SHAPE.buckets,
    rules=(),
    state_machine_functions={"ParkArn": "park"},
    api_routes=SHAPE.api_routes,
)
ASL = {
    "StartAt": "Park",
    "States": {
        "Park": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
            "Parameters": {
                "FunctionName": "${ParkArn}",
                "Payload": {"token.$": "$$.Task.Token", "key.$": "$.key"},
            },
            "HeartbeatSeconds": 600,  # as the job workflow's agent steps: heartbeats are awaited
            "End": True,
        }
    },
}
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module", name="runtime")
def agent_route_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    workdir = tmp_path_factory.mktemp("agent-route")
    asl = workdir / "test.asl.json"
    asl.write_text(json.dumps(ASL))
    # The api function reads its declared settings; the scheduling ones are unused here.
    unused = {"schedule_group": "unused", "scheduler_role_arn": "unused", "scheduled_run_arn": "unused"}
    with LocalRuntime(
        workdir, time_scale=0.01, shape=SHAPE_UNDER_TEST, state_machine_file=asl, settings_overrides=unused
    ) as started:
        yield started

"""Handlers run in-process: from Step Functions tasks, EventBridge rules and direct invokes."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fixtures_handlers as handlers  # noqa: E402

from spotrun.local.runtime import LocalRuntime  # noqa: E402
from spotrun.shape import SHAPE, DeploymentShape, FunctionSpec, RuleSpec  # noqa: E402

SHAPE_UNDER_TEST = DeploymentShape(
    functions=(
        FunctionSpec("echo", "fixtures_handlers.echo", "Returns its event.", timeout_seconds=30),
        FunctionSpec("no_capacity", "fixtures_handlers.no_capacity", "Raises Capacity.Unavailable."),
        FunctionSpec("park", "fixtures_handlers.park", "Keeps the task token."),
        FunctionSpec("submit", "fixtures_handlers.record", "Records what it receives."),
    ),
    tables=SHAPE.tables,
    buckets=SHAPE.buckets,
    rules=tuple(RuleSpec(r.name, r.description, r.pattern, "submit", r.source_bucket) for r in SHAPE.rules),
    state_machine_functions={"EchoArn": "echo", "NoCapacityArn": "no_capacity", "ParkArn": "park"},
)

ASL = {
    "StartAt": "Echo",
    "States": {
        "Echo": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "Parameters": {"FunctionName": "${EchoArn}", "Payload.$": "$"},
            "ResultSelector": {"echo.$": "$.Payload"},
            "ResultPath": "$.echo",
            "Next": "Acquire",
        },
        "Acquire": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke",
            "Parameters": {"FunctionName": "${NoCapacityArn}", "Payload.$": "$"},
            "Catch": [{"ErrorEquals": ["Capacity.Unavailable"], "ResultPath": "$.caught", "Next": "Park"}],
            "Next": "Unreachable",
        },
        "Unreachable": {"Type": "Fail", "Error": "Test.Unreachable"},
        "Park": {
            "Type": "Task",
            "Resource": "arn:aws:states:::lambda:invoke.waitForTaskToken",
            "Parameters": {
                "FunctionName": "${ParkArn}",
                "Payload": {"token.$": "$$.Task.Token", "key.$": "$.key"},
            },
            "ResultPath": "$.parked",
            "End": True,
        },
    },
}


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    workdir = tmp_path_factory.mktemp("workflow")
    asl = workdir / "test.asl.json"
    asl.write_text(json.dumps(ASL))
    with LocalRuntime(workdir, time_scale=0.01, shape=SHAPE_UNDER_TEST, state_machine_file=asl) as started:
        yield started


def _wait_for(predicate: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_tasks_call_handlers_route_named_errors_and_wait_for_the_token(runtime: LocalRuntime) -> None:
    # Given the test state machine
    sfn = runtime.client("stepfunctions")
    handlers.TOKEN_PARKED.clear()

    # When an execution starts and the parked task token is answered, as the agent does
    arn = sfn.start_execution(
        stateMachineArn=runtime.settings.state_machine_arn,
        name="tasks-1",
        input=json.dumps({"key": "tasks-1"}),
    )["executionArn"]
    assert handlers.TOKEN_PARKED.wait(10)
    sfn.send_task_success(taskToken=handlers.TOKENS["tasks-1"], output=json.dumps({"trained": True}))
    done = _wait_for(lambda: (d := sfn.describe_execution(executionArn=arn))["status"] != "RUNNING" and d)

    # Then the echo handler got the input and a context, the dotted error was caught by name,
    # and the token's output became the task's result
    assert done["status"] == "SUCCEEDED"
    output = json.loads(done["output"])
    assert output["echo"]["echo"]["received"] == {"key": "tasks-1"}
    assert output["echo"]["echo"]["function_name"] == "spotrun-echo"
    assert 0 < output["echo"]["echo"]["remaining_ms"] <= 30_000
    assert output["caught"]["Error"] == "Capacity.Unavailable"
    assert json.loads(output["caught"]["Cause"])["errorMessage"] == "no pool for tasks-1"
    assert output["parked"] == {"trained": True}


def test_a_manifest_put_reaches_the_rule_function(runtime: LocalRuntime) -> None:
    # Given the jobs bucket, whose manifests/ prefix the rule watches
    s3 = runtime.client("s3")
    handlers.RECEIVED.clear()
    handlers.RECEIVED_EVENT.clear()

    # When one object is put outside manifests/ and two inside
    s3.put_object(Bucket=runtime.settings.jobs_bucket, Key="elsewhere/a.yaml", Body=b"x")
    s3.put_object(Bucket=runtime.settings.jobs_bucket, Key="manifests/a.yaml", Body=b"x")
    s3.put_object(Bucket=runtime.settings.jobs_bucket, Key="manifests/b.yaml", Body=b"x")
    _wait_for(lambda: len(handlers.RECEIVED) >= 2)
    time.sleep(0.3)  # a stray third delivery would arrive by now

    # Then the function received both manifest events, in the EventBridge envelope, with distinct ids
    assert sorted(e["detail"]["object"]["key"] for e in handlers.RECEIVED) == [
        "manifests/a.yaml",
        "manifests/b.yaml",
    ]
    event = handlers.RECEIVED[0]
    assert event["source"] == "aws.s3"
    assert event["detail-type"] == "Object Created"
    assert event["detail"]["bucket"]["name"] == runtime.settings.jobs_bucket
    assert event["time"].endswith("Z")
    assert event["detail"]["object"]["etag"]  # AWS's spelling (moto's own is eTag)
    assert event["detail"]["reason"] == "PutObject"
    assert len({e["id"] for e in handlers.RECEIVED}) == 2


def test_put_events_reaches_a_lambda_target_with_its_input_path(runtime: LocalRuntime) -> None:
    # Given a rule on custom events whose target takes only the detail
    events = runtime.client("events")
    events.put_rule(Name="test-custom", EventPattern=json.dumps({"source": ["test.custom"]}))
    events.put_targets(
        Rule="test-custom",
        Targets=[{"Id": "echo", "Arn": runtime.deployment.function_arns["submit"], "InputPath": "$.detail"}],
    )
    handlers.RECEIVED.clear()

    # When an event is put on the default bus
    entries = events.put_events(
        Entries=[{"Source": "test.custom", "DetailType": "Ping", "Detail": '{"n": 7}'}]
    )

    # Then the call returns at once and the function receives the selected input
    assert entries["FailedEntryCount"] == 0
    assert _wait_for(lambda: handlers.RECEIVED) == [{"n": 7}]


def test_direct_invoke_returns_the_payload_or_the_function_error(runtime: LocalRuntime) -> None:
    # Given the Lambda client
    lambda_ = runtime.client("lambda")

    # When the echo and failing functions are invoked
    ok = lambda_.invoke(FunctionName="spotrun-echo", Payload=json.dumps({"a": 1}))
    failed = lambda_.invoke(FunctionName="spotrun-no_capacity", Payload=json.dumps({"key": "k"}))

    # Then the first returns the model as JSON, the second the error payload flagged as a function error
    assert json.loads(ok["Payload"].read())["received"] == {"a": 1}
    assert "FunctionError" not in ok
    assert failed["FunctionError"] == "Handled"
    assert json.loads(failed["Payload"].read())["errorType"] == "Capacity.Unavailable"


def test_set_handler_swaps_a_function_for_a_recorder(runtime: LocalRuntime) -> None:
    # Given the echo function served by a recorder instead
    calls: list[Any] = []
    runtime.set_handler("echo", lambda event, context: calls.append(event) or {"recorded": True})

    try:
        # When it is invoked
        reply = runtime.client("lambda").invoke(FunctionName="spotrun-echo", Payload=b'{"b": 2}')

        # Then the recorder ran in-process
        assert json.loads(reply["Payload"].read()) == {"recorded": True}
        assert calls == [{"b": 2}]
    finally:
        runtime.set_handler("echo", "fixtures_handlers.echo")

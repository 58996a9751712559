"""The functions' one entry-point decorator, :func:`functions.runtime.function_handler`.

A probe handler in this module stands for ``functions/<name>.py``'s: a shape declaring it (as
:data:`spotrun.shape.SHAPE` declares each function's) replaces the deployment's for each test, and the events are
the samples AWS delivers (``tests/events/``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.metrics import MetricUnit
from pydantic import ValidationError

from functions import runtime
from spotrun.aws.events import Ec2InstanceEvent
from spotrun.aws.settings import MissingSettings
from spotrun.model.errors import InstanceLost
from spotrun.shape import DeploymentShape, FunctionSpec
from tests.lambda_context import lambda_context

EVENTS = Path(__file__).resolve().parent.parent / "events"
WARNING = json.loads((EVENTS / "ec2-spot-interruption-warning.json").read_text())
OBJECT_CREATED = json.loads((EVENTS / "s3-object-created.json").read_text())
LOST = "i-0fffffffffffffff0"  # an instance the probe's use case reports lost

# What the probe handler got, invocation by invocation: its request, its ports and Powertools' log keys.
CALLS: list[tuple[Ec2InstanceEvent, runtime.Ports, dict[str, Any]]] = []
RAW_CALLS: list[tuple[runtime.RawInvocation, runtime.Ports]] = []


def handler(event: Ec2InstanceEvent, aws: runtime.Ports) -> dict[str, Any]:
    CALLS.append((event, aws, runtime.logger.get_current_keys()))
    runtime.metrics.add_metric(name="ProbeEvents", unit=MetricUnit.Count, value=1)
    if event.detail.instance_id == LOST:
        raise InstanceLost(f"instance {LOST} is gone")
    return {"instance_id": event.detail.instance_id}


def raw_handler(invocation: runtime.RawInvocation, aws: runtime.Ports) -> runtime.RawInvocation:
    # As the API functions' handlers: the event is parsed further in, and the settings read where first needed.
    RAW_CALLS.append((invocation, aws))
    return invocation


def undeclared(event: Ec2InstanceEvent, aws: runtime.Ports) -> None:
    """A handler no function of the shape has."""


@pytest.fixture
def probe(monkeypatch):
    """The probe function's entry point, in a deployment of two functions, each reading its own jobs table."""
    for name in [name for name in os.environ if name.startswith(("SPOTRUN_", "AWS_"))]:
        monkeypatch.delenv(name)
    for name, value in {
        "SPOTRUN_JOBS_TABLE": "probe-jobs",
        "AWS_REGION": "eu-west-1",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    shape = DeploymentShape(
        functions=(
            FunctionSpec(
                "release", "functions.release.handler", "Another function.", settings=("event_bus_name",)
            ),
            FunctionSpec("probe", f"{__name__}.handler", "The probe.", settings=("jobs_table",)),
            FunctionSpec(
                "raw", f"{__name__}.raw_handler", "A probe parsing its own event.", settings=("jobs_table",)
            ),
        ),
        tables=(),
        buckets=(),
        rules=(),
    )
    monkeypatch.setattr(runtime, "SHAPE", shape)
    CALLS.clear()
    RAW_CALLS.clear()
    runtime.reset()
    yield runtime.function_handler(Ec2InstanceEvent)(handler)
    runtime.reset()


def test_the_event_is_parsed_into_the_model_and_the_handler_gets_its_functions_ports(probe):
    # Given the probe function's entry point
    # When it is invoked with EC2's interruption warning, as a mapping and as JSON text
    answers = [
        probe(WARNING, lambda_context("spotrun-probe")),
        probe(json.dumps(WARNING), lambda_context("spotrun-probe")),
    ]
    # Then the handler got the validated model each time, and its answer is the entry point's
    assert answers == [{"instance_id": "i-0123456789abcdef0"}] * 2
    events = [event for event, _, _ in CALLS]
    assert all(isinstance(event, Ec2InstanceEvent) for event in events)
    assert {event.detail_type for event in events} == {"EC2 Spot Instance Interruption Warning"}
    # And the ports of the function the shape declares with this module's handler, read from its own settings
    ports = {id(aws) for _, aws, _ in CALLS}
    assert ports == {id(runtime.ports("probe"))}
    assert CALLS[0][1].settings.jobs_table == "probe-jobs"
    assert CALLS[0][1].settings.region == "eu-west-1"


def test_an_event_that_does_not_match_fails_under_pydantics_name_before_the_settings_and_the_handler(
    probe, monkeypatch
):
    # Given a probe function deployed without its jobs table (its settings, read first, would fail otherwise)
    monkeypatch.delenv("SPOTRUN_JOBS_TABLE")
    # When it is invoked with an event of another kind (S3's Object Created)
    with pytest.raises(ValidationError) as raised:
        probe(OBJECT_CREATED, lambda_context("spotrun-probe"))
    # Then the invocation fails with the model's validation error, the error a workflow's Catch sees by name
    assert type(raised.value).__name__ == "ValidationError"
    assert "detail-type" in str(raised.value)
    # And the handler never ran
    assert CALLS == []


def test_a_missing_setting_fails_the_invocation_before_the_handler_runs(probe, monkeypatch):
    # Given the probe function deployed without its jobs table
    monkeypatch.delenv("SPOTRUN_JOBS_TABLE")
    # When it is invoked with an event it takes
    with pytest.raises(MissingSettings, match="SPOTRUN_JOBS_TABLE"):
        probe(WARNING, lambda_context("spotrun-probe"))
    # Then its handler never ran, whatever path it would have taken
    assert CALLS == []


def test_an_error_of_the_use_case_reaches_the_workflow_under_its_own_name(probe):
    # Given the warning for an instance the use case finds gone
    lost = {**WARNING, "detail": {**WARNING["detail"], "instance-id": LOST}}
    # When the probe is invoked with it
    with pytest.raises(InstanceLost) as raised:
        probe(lost, lambda_context("spotrun-probe"))
    # Then the error leaves the entry point as raised: Step Functions routes on its name
    assert type(raised.value).__name__ == "Instance.Lost"


def test_each_invocation_runs_inside_powertools_logger_and_metrics(probe, capsys):
    # Given the probe function's entry point
    # When it is invoked
    probe(WARNING, lambda_context("spotrun-probe"))
    # Then its log lines carried the invocation's context (Logger.inject_lambda_context)
    _, _, keys = CALLS[0]
    assert keys["function_request_id"] == lambda_context("spotrun-probe").aws_request_id
    assert keys["function_name"] == "spotrun-probe"
    # And the metric it added was flushed as one EMF document at its end (Metrics.log_metrics)
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert [(document["service"], document["ProbeEvents"]) for document in emitted] == [("spotrun", [1.0])]


def test_a_handler_the_shape_does_not_declare_is_refused_when_decorated(probe):
    # Given a handler no function of the shape has
    # When it is decorated
    with pytest.raises(LookupError) as raised:
        runtime.function_handler(Ec2InstanceEvent)(undeclared)
    # Then the decoration fails, naming it: it would have no declared settings to read
    assert f"{__name__}.undeclared" in str(raised.value)


def test_a_function_parsing_its_own_event_gets_it_unparsed_and_reads_its_settings_where_first_needed(
    probe, monkeypatch
):
    # Given a function whose request is the raw invocation (as the API's), deployed without its jobs table
    monkeypatch.delenv("SPOTRUN_JOBS_TABLE")
    entry = runtime.function_handler(runtime.RawInvocation)(raw_handler)
    context = lambda_context("spotrun-probe")
    # When it is invoked with an event no model of its would take
    answer = entry(OBJECT_CREATED, context)
    # Then its handler ran with the event and the context as Lambda gave them
    assert answer == (OBJECT_CREATED, context)
    assert answer.event is OBJECT_CREATED
    # And with its own function's ports, whose settings fail, naming the variable, only where first read
    [(_, aws)] = RAW_CALLS
    assert aws is runtime.ports("raw")
    with pytest.raises(MissingSettings, match="SPOTRUN_JOBS_TABLE"):
        aws.settings  # noqa: B018

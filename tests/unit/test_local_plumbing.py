"""Small parts of the embedded runtime: in-process Lambda calls, patches, scaled time, ASL substitution."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from pydantic import BaseModel

from spotrun.local.clock import Clock
from spotrun.local.patches.events import envelope, target_input
from spotrun.local.patches.lambda_invoke import HandlerRegistry, import_handler, invoke_in_process
from spotrun.local.patches.reversible import PatchSet
from spotrun.local.provision import substitute
from spotrun.model.errors import CapacityUnavailable


class _Function:
    """The attributes of moto's LambdaFunction that the in-process call reads."""

    function_name = "spotrun-test"
    handler = "unused.handler"
    version = "$LATEST"
    function_arn = "arn:aws:lambda:us-east-1:123456789012:function:spotrun-test"
    memory_size = 256
    timeout = 30


class _Reply(BaseModel):
    value: int


def _registry(handler: Any) -> HandlerRegistry:
    registry = HandlerRegistry()
    registry.register(_Function.function_name, handler)
    return registry


def test_handler_gets_the_parsed_event_and_a_context() -> None:
    # Given a handler returning a pydantic model
    seen: dict[str, Any] = {}

    def handler(event: Any, context: Any) -> _Reply:
        seen.update(event=event, name=context.function_name, left=context.get_remaining_time_in_millis())
        return _Reply(value=event["n"] * 2)

    # When moto hands over the event as JSON text
    payload, errored, _ = invoke_in_process(_registry(handler), _Function(), '{"n": 21}')

    # Then the handler got a dict and a context, and its model came back as JSON
    assert (json.loads(payload), errored) == ({"value": 42}, False)
    assert seen["event"] == {"n": 21}
    assert seen["name"] == "spotrun-test"
    assert 29_000 < seen["left"] <= 30_000


def test_an_exception_becomes_an_error_payload_with_its_dotted_name() -> None:
    # Given a handler raising one of spotrun's named errors
    def handler(event: Any, context: Any) -> None:
        raise CapacityUnavailable("no pool")

    # When invoked with an already parsed event (as Step Functions does)
    payload, errored, _ = invoke_in_process(_registry(handler), _Function(), {"n": 1})

    # Then the payload is the Lambda runtime's error shape, under the dotted name the ASL matches
    assert errored is True
    assert json.loads(payload) == {"errorType": "Capacity.Unavailable", "errorMessage": "no pool"}


def test_an_unserialisable_result_is_a_marshal_error() -> None:
    # Given a handler returning something JSON cannot hold
    # When invoked
    payload, errored, _ = invoke_in_process(_registry(lambda e, c: object()), _Function(), None)

    # Then it fails as the Lambda runtime does
    assert errored is True
    assert json.loads(payload)["errorType"] == "Runtime.MarshalError"


def test_an_unregistered_function_falls_back_to_its_handler_path() -> None:
    # Given / When a dotted path is imported
    handler = import_handler("json.dumps")

    # Then it is the attribute; a malformed path is refused
    assert handler is json.dumps
    with pytest.raises(ImportError):
        import_handler("nodots")


def test_patches_are_undone_in_reverse_and_restore_inherited_attributes() -> None:
    # Given a class inheriting a method and defining another
    class Base:
        def inherited(self) -> str:
            return "base"

    class Child(Base):
        def own(self) -> str:
            return "own"

    patches = PatchSet()

    # When both are patched
    patches.add(Child, "inherited", lambda self: "patched")
    own = patches.add(Child, "own", lambda self: "patched " + own.wrapped(self))

    # Then the replacements run (and can call through), and undo restores exactly what was there
    assert (Child().inherited(), Child().own()) == ("patched", "patched own")
    patches.undo_all()
    patches.undo_all()
    assert (Child().inherited(), Child().own()) == ("base", "own")
    assert "inherited" not in vars(Child)


def test_clock_scales_delays_and_cancels_on_close() -> None:
    # Given a clock at 1/100 of real time
    clock = Clock(0.01)
    fired = threading.Event()
    never = threading.Event()

    # When one action is due in 10 simulated seconds and another in 1000
    started = time.monotonic()
    clock.call_later(10, fired.set)
    clock.call_later(1000, never.set)

    # Then the first runs after ~0.1 s; closing cancels the second and refuses new ones
    assert fired.wait(2)
    assert time.monotonic() - started < 1.5
    clock.close()
    assert clock.call_later(0, never.set) is None
    assert not never.wait(0.2)


def test_substitute_fills_placeholders_and_refuses_unknown_ones() -> None:
    # Given an ASL with two placeholders
    definition = '{"A": "${AcquireFunctionArn}", "B": "${ReleaseFunctionArn}"}'

    # When both have values, and when one is missing
    filled = substitute(definition, {"AcquireFunctionArn": "arn:a", "ReleaseFunctionArn": "arn:r"})

    # Then the first is filled and the second names the missing placeholder
    assert json.loads(filled) == {"A": "arn:a", "B": "arn:r"}
    with pytest.raises(ValueError, match="ReleaseFunctionArn"):
        substitute(definition, {"AcquireFunctionArn": "arn:a"})


def test_event_envelope_and_target_input() -> None:
    # Given an event as moto builds it (epoch time, a moto-only key)
    event = {"id": "1", "time": 1_700_000_000.0, "ingestion-time": 1.0, "detail": {"k": "v"}}

    # When shaped for delivery and for targets with Input, InputPath or neither
    delivered = envelope(event)

    # Then time is RFC 3339, moto's key is gone, and each target gets what it asked for
    assert delivered == {"id": "1", "time": "2023-11-14T22:13:20Z", "detail": {"k": "v"}}
    assert target_input({"Arn": "x"}, delivered) == delivered
    assert target_input({"Arn": "x", "Input": '{"c": 1}'}, delivered) == {"c": 1}
    assert target_input({"Arn": "x", "InputPath": "$.detail"}, delivered) == {"k": "v"}


class _BootingInstance:
    """What InstanceManager's boot reads and sets of a simulated instance (its moto record's state, its events)."""

    def __init__(self) -> None:
        self.instance_id = "i-0123456789abcdef0"
        self.model = type("Record", (), {"state": "pending", "_state": type("State", (), {})()})()
        self.booted, self.registered, self.ended = threading.Event(), threading.Event(), threading.Event()


def test_the_ssm_agent_registers_a_delay_after_running_however_slow_the_state_change_is_to_publish(tmp_path):
    # Given an emulator whose registration delay is 0.1 s real and whose "running" event takes 1 s to publish
    from spotrun.local.capacity.pools import CapacityModel
    from spotrun.local.instances.fleet import InstanceManager

    def slow_publish(source: str, detail_type: str, detail: dict[str, Any], resources: list[str]) -> None:
        time.sleep(1.0)

    clock = Clock(0.01)
    manager = InstanceManager(
        tmp_path, clock, CapacityModel([]), slow_publish, "123456789012", "us-east-1", 10.0
    )
    sim = _BootingInstance()
    # When the instance boots
    manager._boot(sim)
    # Then its SSM agent registered while the event was still being published: SSM's delay counts from running
    assert sim.booted.is_set()
    assert sim.registered.is_set()
    clock.close()

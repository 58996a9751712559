"""The emulator's Lambda execution environments: one invocation at a time each, module state of their own."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

from spotrun.local.patches.lambda_invoke import ExecutionEnvironments, fresh_handler

PROBE = "tests.unit.lambda_probe.handler"
ISOLATED = ("tests.unit.lambda_probe",)  # as the deployment's ``functions`` are


def invoke_together(environments: ExecutionEnvironments, count: int, hold: float) -> list[dict[str, Any]]:
    answers: list[Any] = [None] * count
    start = threading.Barrier(count)

    def call(index: int) -> None:
        start.wait()
        answers[index] = environments({"hold": hold}, None)

    threads = [threading.Thread(target=call, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return answers


def test_invocations_one_after_another_reuse_one_warm_environment():
    # Given a function's environments
    environments = ExecutionEnvironments(PROBE, packages=ISOLATED)
    # When it is invoked three times in a row
    answers = [environments({}, None) for _ in range(3)]
    # Then one environment served them all and kept its module state between them
    assert [answer["calls"] for answer in answers] == [1, 2, 3]
    assert len({answer["environment"] for answer in answers}) == 1
    assert environments.created == 1


def test_concurrent_invocations_each_get_an_environment_with_its_own_module_state():
    # Given a function's environments
    environments = ExecutionEnvironments(PROBE, packages=ISOLATED)
    # When four invocations run at once
    answers = invoke_together(environments, 4, hold=0.3)
    # Then each ran in a new environment whose module state had seen only it
    assert [answer["calls"] for answer in answers] == [1, 1, 1, 1]
    assert len({answer["environment"] for answer in answers}) == 4
    assert environments.created == 4


def test_beyond_the_bound_an_invocation_waits_for_a_free_environment():
    # Given a function allowed two environments
    environments = ExecutionEnvironments(PROBE, max_environments=2, packages=ISOLATED)
    # When four invocations arrive at once
    answers = invoke_together(environments, 4, hold=0.2)
    # Then all four are answered by the two environments, two invocations each
    assert environments.created == 2
    assert sorted(answer["calls"] for answer in answers) == [1, 1, 2, 2]


class _Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.itself = self


def test_a_functions_environment_leaves_the_emulators_objects_collectable():
    # Given an object of the emulator's process in a cycle, alive while a function's environment is created
    node = _Node()
    alive = weakref.ref(node)
    # When the emulator imports a deployed function afresh (its import window freezes what exists on AWS)
    fresh_handler("functions.ec2_events.handler", ("functions",))
    # Then nothing stays frozen, and the object is freed by the next collection once it is dropped
    assert gc.get_freeze_count() == 0
    del node
    gc.collect()
    assert alive() is None

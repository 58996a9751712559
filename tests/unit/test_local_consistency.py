"""The emulator's injections: CreateFleet errors by count, EC2 NotFound after launch by count, window or chance."""

import time

import pytest

from spotrun.local.capacity.injected_errors import InjectedFleetErrors
from spotrun.local.clock import Clock
from spotrun.local.patches.ec2_consistency import Ec2Consistency


@pytest.fixture
def consistency():
    clock = Clock(0.01)
    yield Ec2Consistency(clock, seed=1)
    clock.close()


def test_injected_fleet_errors_are_used_up_one_call_each() -> None:
    # Given two calls' worth of a quota error, then one of a template error
    errors = InjectedFleetErrors()
    errors.inject("VcpuLimitExceeded", count=2)
    errors.inject("InvalidLaunchTemplateName.NotFoundException")
    # When four CreateFleet calls take their error
    taken = [errors.take() for _ in range(4)]
    # Then they come in order, with EC2-like messages, and then none
    assert [t[0] if t else None for t in taken] == [
        "VcpuLimitExceeded",
        "VcpuLimitExceeded",
        "InvalidLaunchTemplateName.NotFoundException",
        None,
    ]
    assert "vCPU limit" in taken[0][1]


@pytest.mark.parametrize(("code", "count"), [("", 1), ("VcpuLimitExceeded", 0)])
def test_a_fleet_error_without_code_or_calls_is_refused(code: str, count: int) -> None:
    # Given the queue of injected errors
    # When an empty code or no call is injected
    # Then it is refused
    with pytest.raises(ValueError, match=r"code|count"):
        InjectedFleetErrors().inject(code, count)


def test_hidden_launches_by_count_then_by_window(consistency) -> None:
    # Given the next launch hidden from both calls, for 20 simulated seconds (0.2 s real)
    consistency.inject(describe=1, terminate=1, window_seconds=20)
    consistency.launched("i-1")
    consistency.launched("i-2")
    # When they are looked up at once
    # Then only the first is hidden, from both calls
    assert consistency.hidden_from_describe(["i-1", "i-2"]) == ["i-1"]
    assert consistency.hidden_from_terminate(["i-1", "i-2"]) == ["i-1"]
    # And not once the window has passed
    time.sleep(0.3)
    assert consistency.hidden_from_describe(["i-1"]) == []


def test_a_terminate_hidden_for_a_number_of_calls_ignores_time(consistency) -> None:
    # Given the next launch hidden from two TerminateInstances calls
    consistency.inject(terminate=1, terminate_calls=2)
    consistency.launched("i-1")
    # When terminate is called three times
    # Then the first two answer NotFound, the third reaches the instance; describe always sees it
    assert [consistency.hidden_from_terminate(["i-1"]) for _ in range(3)] == [["i-1"], ["i-1"], []]
    assert consistency.hidden_from_describe(["i-1"]) == []


def test_a_probability_of_one_hides_every_launch_and_bad_ones_are_refused(consistency) -> None:
    # Given every launch hidden from DescribeInstances by chance
    consistency.inject(describe_probability=1.0, window_seconds=100)
    for instance_id in ("i-1", "i-2", "i-3"):
        consistency.launched(instance_id)
    # Then all are hidden; and a probability outside [0, 1] is refused
    assert consistency.hidden_from_describe(["i-1", "i-2", "i-3"]) == ["i-1", "i-2", "i-3"]
    with pytest.raises(ValueError, match="between 0 and 1"):
        consistency.inject(terminate_probability=1.5)


def test_the_not_found_answers_served_are_counted_per_call_and_instance(consistency) -> None:
    # Given one launch hidden from two TerminateInstances calls, one hidden from DescribeInstances, one not hidden
    consistency.inject(describe=1, terminate=1, terminate_calls=2, window_seconds=1000.0)
    consistency.launched("i-hidden")
    consistency.launched("i-seen")
    # When DescribeInstances asks for both twice, and TerminateInstances three times
    for _ in range(2):
        consistency.hidden_from_describe(["i-hidden", "i-seen"])
    for _ in range(3):
        consistency.hidden_from_terminate(["i-hidden", "i-seen"])
    # Then each NotFound served is counted against its call and instance, and nothing else
    assert consistency.not_found_served("DescribeInstances", "i-hidden") == 2
    assert consistency.not_found_served("TerminateInstances", "i-hidden") == 2
    assert consistency.not_found_served("DescribeInstances", "i-seen") == 0
    assert consistency.not_found_served("TerminateInstances", "i-seen") == 0

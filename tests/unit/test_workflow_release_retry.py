"""The workflow retries a release EC2 has not confirmed for longer than EC2 may take to become consistent."""

import json

import pytest

from spotrun.control.capacity.readiness import EC2_CONSISTENCY_GRACE
from spotrun.shape import STATE_MACHINE_FILE

ASL = json.loads(STATE_MACHINE_FILE.read_text())


@pytest.mark.parametrize("state", ["ReleaseCapacity", "ReleaseAfterFailure"])
def test_release_states_retry_a_pending_release_past_the_consistency_window(state: str) -> None:
    # Given a release state of the workflow
    retriers = ASL["States"][state]["Retry"]
    # When its retrier for Instances.ReleasePending is read (the first that matches the error wins)
    retrier = next(
        r
        for r in retriers
        if "Instances.ReleasePending" in r["ErrorEquals"] or "States.ALL" in r["ErrorEquals"]
    )
    assert "Instances.ReleasePending" in retrier["ErrorEquals"]
    # Then its backoff outlasts the window in which NotFound may hide a running instance
    interval, rate = retrier["IntervalSeconds"], retrier.get("BackoffRate", 2.0)
    total = sum(interval * rate**n for n in range(retrier["MaxAttempts"]))
    assert total > EC2_CONSISTENCY_GRACE.total_seconds()


def test_a_release_that_never_succeeds_still_records_the_failure_and_keeps_its_error() -> None:
    # Given the release on the failure path, whose retries may run out (EC2 never confirming a termination)
    state = ASL["States"]["ReleaseAfterFailure"]
    # When its catchers are read
    catchers = state.get("Catch", [])
    # Then every error still reaches RecordFailure, with the job's own error left in place at $.error
    assert [c["ErrorEquals"] for c in catchers] == [["States.ALL"]]
    assert catchers[0]["Next"] == "RecordFailure"
    assert catchers[0]["ResultPath"] != "$.error"

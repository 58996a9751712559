"""bench/scale.py's verdicts on one measurement: what counts as an interruption that took effect."""

from __future__ import annotations

from bench.scale import summarize


def _result(status: str, digest: str | None, effects: list) -> dict:
    return {"status": status, "model_sha256": digest, "planned": 1, "effects": effects}


def test_an_interruption_counts_when_its_attempt_got_the_notice_and_ended_on_it():
    # Given four jobs: one whose warning's checkpoint committed, one reclaimed before its checkpoint committed,
    # one that completed the attempt the interruption was decided for, one whose attempt died of a heartbeat
    # timeout before the notice
    once = {
        "jobs": 3,  # the CPU is divided by this
        "control_plane_cpu_seconds": 6.0,
        "instances_cpu_seconds": 3.0,
        "results": [
            _result("SUCCEEDED", "a", [[1, True, "interrupted", True]]),
            _result("SUCCEEDED", "a", [[1, True, "interrupted", False]]),
            _result("SUCCEEDED", "a", [[1, True, "completed", False]]),
            _result("SUCCEEDED", "a", [[1, False, "heartbeat-timeout", False]]),
        ],
    }
    # When it is summarized
    summary = summarize(once)
    # Then two of four took effect, one of them with its checkpoint committed, and the CPU is per job
    assert summary["planned"] == 4
    assert summary["taken_effect"] == 2
    assert summary["checkpoint_committed"] == 1
    assert summary["succeeded"] == 4
    assert summary["identical_models"]
    assert summary["control_plane_cpu_per_job"] == 2.0


def test_a_different_or_missing_model_is_not_identical():
    # Given two jobs with different digests, and two where one has none
    differ = [_result("SUCCEEDED", "a", []), _result("SUCCEEDED", "b", [])]
    missing = [_result("SUCCEEDED", "a", []), _result("FAILED", None, [])]
    # When they are summarized / Then neither has identical models, and a failed job is not counted
    for results in (differ, missing):
        once = {"jobs": 2, "control_plane_cpu_seconds": 0, "instances_cpu_seconds": 0, "results": results}
        assert not summarize(once)["identical_models"]
    assert (
        summarize(
            {"jobs": 2, "control_plane_cpu_seconds": 0, "instances_cpu_seconds": 0, "results": missing}
        )["succeeded"]
        == 1
    )

"""A deadline job that went to on-demand returns to spot once spot is back and its policy allows the trip.

The whole path runs in the emulator: the agent's heartbeat (the API) asks on the deployment's bus, the rule
delivers to the ``deadline_return`` function, which launches the spot instance, gives the on-demand attempt its
notice, and the workflow's next attempt runs on that instance from the checkpoint.
"""

from __future__ import annotations

from spotrun.model.job.record import JobStatus
from tests.e2e.conftest import assert_nothing_left_running, example_manifest
from tests.e2e.test_deadline import (
    DEADLINE,
    TICK_SECONDS,
    finished_within_deadline,
    recorded_ticks,
    run_on_trace,
    simulated,
)

# Work in steps: the policy knows it only once the job has trained a while (12 s at the emulator's scale, longer
# than this job's 300 steps), and until then it runs on spot while over half the time to the deadline is left,
# on on-demand when spot cannot be had (spotrun.model.deadline.work.decide_without_estimate).
STEPS = 300
STAMP_LEEWAY_S = 1.0  # how long before its EC2 call a function may stamp a decision
WORK_HOURS = 0.006  # what those steps take with their saves (as tests/e2e/test_deadline.py's job), in hours


def steps_manifest(name: str) -> bytes:
    return example_manifest(
        **{
            "name: tiny-regression": f"name: {name}",
            "  spot: true\n": f"  spot: true\n  deadline: {DEADLINE}\n",
            "  max_runtime_minutes: 30\n": f"  max_runtime_minutes: 30\n  total_steps: {STEPS}\n",
        }
    )


def test_a_job_on_on_demand_returns_to_spot_once_spot_is_back(runtime):
    # Given a trace with no spot for its first tick (6 s), then spot to the end
    counts = [0] + [1] * 200
    name = "deadline-return-to-spot"
    # When the deadline job, its work in steps, runs on it
    job, began = run_on_trace(runtime, name, counts, manifest=steps_manifest(name))
    # Then it started on on-demand (spot gone, and its work not known to judge a wait), and went back to spot once
    # spot was there (the deadline still far): the on-demand attempt ended as a move, no interruption; the spot
    # one resumed from its checkpoint and finished within the deadline
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert [attempt.lifecycle for attempt in job.attempts] == ["on-demand", "spot"]
    assert job.attempts[0].end_reason == "deadline-move"
    assert job.interruptions == 0
    assert job.attempts[1].restored_step is not None
    assert finished_within_deadline(job)
    first, back = job.deadline_decisions
    assert first.choice == "on-demand"
    assert "spot is gone" in first.reason, first.reason
    assert back.choice == "spot"
    assert "the deadline is far" in back.reason, back.reason
    # and the simulator, replaying the same trace with the same rule before an estimate (the job's 300 steps in
    # the hours of work they took), makes the same changes of choice: on-demand in the first tick, back to spot
    # in the next. The control plane's return comes at a heartbeat, so once the on-demand attempt trains (after
    # its boot and staging, 7.2 s assumed): in the simulator's tick or up to two later. A decision is stamped with
    # its function's clock when it began, a moment before the EC2 call that acts on it: a return launched just
    # after spot came back may be stamped just before (seen once: in tick 0), hence the leeway of a second.
    replayed = simulated(job, counts, steps_hours=WORK_HOURS)
    recorded = recorded_ticks(job, began)
    expected = [(d.choice.value, step) for step, d in replayed.decisions]
    assert [choice for choice, _ in recorded] == [choice for choice, _ in expected] == ["on-demand", "spot"]
    for decision, (_, step) in zip(job.deadline_decisions, expected, strict=True):
        at = (decision.at - began).total_seconds()
        assert step * TICK_SECONDS - STAMP_LEEWAY_S <= at < (step + 3) * TICK_SECONDS, (recorded, expected)
    # and the spot instance was had before the on-demand one was let go, by the emulator's own launch and
    # termination times: the spot attempt ran on an instance launched while the on-demand one still ran
    on_demand, spot = (runtime.capacity.held(attempt.instance_id) for attempt in job.attempts)
    assert on_demand is not None
    assert spot is not None
    assert on_demand[1] is not None
    assert spot[0] < on_demand[1], (spot, on_demand)
    assert_nothing_left_running(runtime, job)

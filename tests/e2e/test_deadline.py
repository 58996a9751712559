"""A job with a deadline in the emulator, its pools driven by a trace: on-demand in time when spot goes away,
never on-demand while spot is plentiful."""

from __future__ import annotations

from spotrun.local.demo import drop_manifest, wait_for_job
from spotrun.local.trace_pools import TracePools
from spotrun.model.job import INTERRUPTION_REASONS, Job, JobStatus
from spotrun.model.traces import parse_trace
from tests.e2e.conftest import assert_nothing_left_running, example_manifest

# The emulator runs at 0.02: the policy's assumed 6-minute start is 7.2 s, its safety margin 46 s. The job
# trains 300 steps of 0.02 s (about 10 s with its saves, more under load); 0.006 h is 21.6 s of work.
DEADLINE = "2.5m"
WORK_HOURS = "0.006"
SECONDS_PER_TRACE_HOUR = 36.0  # a 10-minute trace tick every 6 s


def deadline_manifest(name: str) -> bytes:
    return example_manifest(
        **{
            "name: tiny-regression": f"name: {name}",
            "  spot: true\n": f"  spot: true\n  deadline: {DEADLINE}\n",
            "  max_runtime_minutes: 30\n": f"  max_runtime_minutes: 30\n  expected_hours: {WORK_HOURS}\n",
        }
    )


def run_on_trace(runtime, name: str, counts: list[int]) -> Job:
    """Drop the deadline job with every pool's spot capacity replayed from ``counts`` (10-minute ticks)."""
    text = f'{{"metadata": {{"gap_seconds": 600}}, "data": {counts}}}'
    keys = [(pool.instance_type, pool.availability_zone) for pool in runtime.capacity.pools()]
    pools = TracePools(
        parse_trace(name, text), runtime.capacity, keys, runtime.interrupt, SECONDS_PER_TRACE_HOUR
    )
    pools.start()
    try:
        submitted = drop_manifest(runtime, deadline_manifest(name), f"{name}.yaml")
        return wait_for_job(runtime, submitted.job_id, timeout=240)
    finally:
        pools.close()
        for instance_type, zone in keys:
            runtime.capacity.refill(instance_type, zone)


def finished_within_deadline(job: Job) -> bool:
    ended = job.timeline[-1].at
    return (ended - job.created_at).total_seconds() <= 150


def test_when_spot_disappears_the_job_moves_to_on_demand_in_time(runtime):
    # Given a trace whose spot capacity is there at submission and gone 6 s later, for good
    # When the deadline job runs on it
    job = run_on_trace(runtime, "deadline-spot-gone", [1] + [0] * 200)
    # Then it started on spot and, once spot was gone (and its pool seen preempted within seconds, too soon for a
    # wait to pay), moved to on-demand with slack left, and finished within its deadline; the record says why
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert finished_within_deadline(job), (job.created_at, job.timeline[-1].at)
    assert [attempt.lifecycle for attempt in job.attempts] == ["spot", "on-demand"]
    # (reclaimed while booting or staging it is a lost instance, while training an interruption: load decides)
    assert job.attempts[0].end_reason in INTERRUPTION_REASONS
    assert [decision.choice for decision in job.deadline_decisions] == ["spot", "on-demand"]
    on_demand = job.deadline_decisions[-1]
    assert "no spot" in on_demand.reason, on_demand.reason
    assert on_demand.slack_hours > 0  # moved while the deadline could still be met
    assert_nothing_left_running(runtime, job)


def test_with_spot_plentiful_it_never_uses_on_demand(runtime):
    # Given a trace with spot all along
    # When the deadline job runs on it
    job = run_on_trace(runtime, "deadline-spot-plenty", [4] * 200)
    # Then it finishes on spot only, within its deadline, and every decision was spot
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert finished_within_deadline(job)
    assert {attempt.lifecycle for attempt in job.attempts} == {"spot"}
    assert {decision.choice for decision in job.deadline_decisions} == {"spot"}

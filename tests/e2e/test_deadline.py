"""A job with a deadline in the emulator, its pools driven by a trace: on-demand in time when spot goes away,
never on-demand while spot is plentiful."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from spotrun.local.capacity.trace_pools import TracePools
from spotrun.local.demo import drop_manifest, wait_for_job
from spotrun.model.deadline.state import Running
from spotrun.model.deadline.stored_job import ASSUMED, POLICY, job_state
from spotrun.model.job.attempt import INTERRUPTION_REASONS
from spotrun.model.job.record import Job, JobStatus
from spotrun.model.simulation.replay import (
    Replay,
    RunResult,
    SimJob,
    replay_policy,
    replayed_restart_hours,
    sim_job_from_state,
)
from spotrun.model.simulation.traces import parse_trace
from tests.e2e.conftest import E2E_TIME_SCALE, assert_nothing_left_running, example_manifest

# The emulator runs at 0.02: the policy's assumed 6-minute start is 7.2 s, its safety margin 38 s. The job
# trains 300 steps of 0.02 s (about 10 s with its saves, more under load); 0.006 h is 21.6 s of work.
DEADLINE = "2.5m"
# Where spot goes for good the policy waits while its slack is above its reserve (about 53 s), then buys
# on-demand: a shorter deadline shortens the wait, the run, and make test.
SPOT_GONE_DEADLINE = "2m"
WORK_HOURS = "0.006"
SECONDS_PER_TRACE_HOUR = 36.0  # a 10-minute trace tick every 6 s


def deadline_manifest(name: str, deadline: str = DEADLINE) -> bytes:
    return example_manifest(
        **{
            "name: tiny-regression": f"name: {name}",
            "  spot: true\n": f"  spot: true\n  deadline: {deadline}\n",
            "  max_runtime_minutes: 30\n": f"  max_runtime_minutes: 30\n  expected_hours: {WORK_HOURS}\n",
        }
    )


TICK_SECONDS = 600 / 3600 * SECONDS_PER_TRACE_HOUR  # one trace tick, in real seconds


def run_on_trace(
    runtime, name: str, counts: list[int], deadline: str = DEADLINE, manifest: bytes | None = None
) -> tuple[Job, datetime]:
    """Drop the deadline job (or ``manifest``) with every pool's spot capacity replayed from ``counts`` (10-minute
    ticks).

    Returns
    -------
    tuple[Job, datetime]
        The finished job, and when the replay started (its tick 0).
    """
    text = f'{{"metadata": {{"gap_seconds": 600}}, "data": {counts}}}'
    keys = [(pool.instance_type, pool.availability_zone) for pool in runtime.capacity.pools()]
    pools = TracePools(
        parse_trace(name, text), runtime.capacity, keys, runtime.interrupt, SECONDS_PER_TRACE_HOUR
    )
    began = datetime.now(UTC)
    pools.start()
    try:
        text = manifest if manifest is not None else deadline_manifest(name, deadline)
        submitted = drop_manifest(runtime, text, f"{name}.yaml")
        return wait_for_job(runtime, submitted.job_id, timeout=240), began
    finally:
        pools.close()
        for instance_type, zone in keys:
            runtime.capacity.refill(instance_type, zone)


def simulated(job: Job, counts: list[int], steps_hours: float | None = None) -> RunResult:
    """The simulator on the same trace, in the same (real) hours, for the job the control plane saw at submission:
    its own inputs (work, deadline, scaled restart/save/interval/notice, prices) and tick.

    ``steps_hours``: the job's work is in steps, which the simulator replays in these hours, with the control
    plane's rule before an estimate (after its scaled training time)."""
    assumed = ASSUMED.scaled(E2E_TIME_SCALE)
    fresh = job.model_copy(update={"attempts": [], "deadline_decisions": [], "steps_reported": None})
    manifest = fresh.require_manifest()
    if steps_hours is not None:
        training = manifest.training.model_copy(update={"expected_hours": steps_hours, "total_steps": None})
        fresh = fresh.model_copy(update={"manifest": manifest.model_copy(update={"training": training})})
    state = job_state(fresh, job.created_at, running=Running.NOTHING, spot_available=False, assumed=assumed)
    sim_job = sim_job_from_state(state, notice_hours=assumed.notice_hours)
    if steps_hours is not None:
        sim_job = dataclasses.replace(sim_job, estimate_after_hours=assumed.estimate_after_hours)
    return replay_policy(
        POLICY,
        sim_job,
        Replay(TICK_SECONDS / 3600, tuple(n > 0 for n in counts)),
        start=0,
        interval_hours=state.checkpoint_interval_hours,
        tick_hours=assumed.tick_hours,
        record=True,
    )


def replace_restart(restart_hours: float) -> SimJob:
    """A job with this restart (only the restart matters to :func:`replayed_restart_hours`)."""
    return SimJob(1.0, 2.0, restart_hours, 0.01, 1.0, 3.0)


# A handler stamps everything it records with the time its call began
# (spotrun.control.capacity.acquire.acquire_instance's `now`), while the fleet answer that decides spot or
# wait comes later in the call: under the suite's load an acquire call lasts up to about a second, so a
# decision stamped that much before a tick's start was made on it.
CALL_SECONDS = 1.0


def recorded_ticks(job: Job, began: datetime) -> list[tuple[str, int]]:
    """Each change of choice on the record, and the trace tick its call saw (see :data:`CALL_SECONDS`)."""
    return [
        (d.choice, int(((d.at - began).total_seconds() + CALL_SECONDS) // TICK_SECONDS))
        for d in job.deadline_decisions
    ]


def finished_within_deadline(job: Job, seconds: float = 150) -> bool:
    ended = job.timeline[-1].at
    return (ended - job.created_at).total_seconds() <= seconds


def test_when_spot_disappears_the_job_moves_to_on_demand_in_time(runtime):
    # Given a trace whose spot capacity is there at submission and gone 6 s later, for good
    # When the deadline job runs on it
    counts = [1] + [0] * 200
    job, began = run_on_trace(runtime, "deadline-spot-gone", counts, SPOT_GONE_DEADLINE)
    # Then it started on spot and, once spot was gone, waited for it while the slack stayed above its reserve (one
    # preemption seen: the prior keeps the pool's rate from reading as "preempted every few seconds"), then moved
    # to on-demand with slack left, and finished within its deadline; the record says why
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert finished_within_deadline(job, 120), (job.created_at, job.timeline[-1].at)
    assert [attempt.lifecycle for attempt in job.attempts] == ["spot", "on-demand"]
    # (reclaimed while booting or staging it is a lost instance, while training an interruption: load decides)
    assert job.attempts[0].end_reason in INTERRUPTION_REASONS
    assert [decision.choice for decision in job.deadline_decisions] == ["spot", "wait", "on-demand"]
    on_demand = job.deadline_decisions[-1]
    assert "no spot" in on_demand.reason, on_demand.reason
    assert on_demand.slack_hours > 0  # moved while the deadline could still be met
    assert_nothing_left_running(runtime, job)
    # and, on this trace with a preemption, the simulator makes the same changes of choice, each within a tick of
    # the simulator's, with a slack within a tick of its: the control plane decides a Lambda call or two after the
    # capacity changed (a tick later at most), but it decides again every second while it waits, so the slack
    # crosses the reserve inside a tick that the simulator, deciding at the start of each, sees only at the next
    # (a tick earlier at most); its preemption's spot time is the attempt's, not a whole tick
    replayed = simulated(job, counts)
    expected = [(d.choice.value, step) for step, d in replayed.decisions]
    recorded = recorded_ticks(job, began)
    assert [c for c, _ in recorded] == [c for c, _ in expected], (recorded, expected)
    tick_hours = TICK_SECONDS / 3600
    for made, (step, sim), (_, at) in zip(job.deadline_decisions, replayed.decisions, recorded, strict=True):
        assert abs(at - step) <= 1, (recorded, expected)
        assert abs(made.slack_hours - sim.slack_hours) <= tick_hours, (made, sim)


def test_with_spot_plentiful_it_never_uses_on_demand(runtime):
    # Given a trace with spot all along
    # When the deadline job runs on it
    job, _ = run_on_trace(runtime, "deadline-spot-plenty", [4] * 200)
    # Then it finishes on spot only, within its deadline, and every decision was spot
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert finished_within_deadline(job)
    assert {attempt.lifecycle for attempt in job.attempts} == {"spot"}
    assert {decision.choice for decision in job.deadline_decisions} == {"spot"}


def test_the_control_plane_decides_as_the_simulator_on_the_same_trace(runtime):
    # Given a trace with no spot for its first two ticks (12 s), then spot to the end
    counts = [0, 0] + [1] * 200
    # When the deadline job runs on it in the emulator
    job, began = run_on_trace(runtime, "deadline-same-as-simulator", counts)
    # and the simulator replays the same trace for the job the control plane saw at submission
    replayed = simulated(job, counts)
    # Then both make the same changes of choice (wait while spot is gone, spot when it comes), at the same trace
    # ticks. The ticks cannot align exactly: the simulator decides at the start of each 6 s tick, the control
    # plane at each acquisition (retried every second while it waits) and heartbeat, a Lambda call or two after
    # the capacity changed. So a recorded decision falls in the tick of the simulator's, up to one tick later
    # (less the submission's offset from the replay's start, < 2 s); its slack is the simulator's less that
    # lateness and the restart's rounding to whole ticks (the replay's slack counts the restart the replay
    # spends, 6 s for the assumed 7.2 s: no work is done before either decision), to the record's rounding (1e-4 h).
    assert job.status is JobStatus.SUCCEEDED, job.error
    recorded = recorded_ticks(job, began)
    expected = [(d.choice.value, step) for step, d in replayed.decisions]
    assert recorded == expected == [("wait", 0), ("spot", 2)], (recorded, expected)
    restart = ASSUMED.scaled(E2E_TIME_SCALE).restart_hours
    rounded_restart = replayed_restart_hours(replace_restart(restart), TICK_SECONDS / 3600) - restart
    for made, (step, sim) in zip(job.deadline_decisions, replayed.decisions, strict=True):
        late_hours = ((made.at - job.created_at).total_seconds() - step * TICK_SECONDS) / 3600
        assert -2 / 3600 <= late_hours <= TICK_SECONDS / 3600, (made, step)
        expected_slack = sim.slack_hours - late_hours + rounded_restart
        assert abs(made.slack_hours - expected_slack) <= 1e-4, (made, sim, late_hours)

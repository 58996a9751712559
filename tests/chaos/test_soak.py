"""Bounded soaks in the emulator: several jobs at once through random chaos, and capacity running out.

Bounded in count (3 jobs, 2 strikes each) and in time (each job must end within its timeout), so the soak
fits in `make test` on a 2-core machine.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

from spotrun.aws.adapters import job_store
from spotrun.cli.display.summary import capacity_wait_text
from spotrun.local.chaos.plan import plan_interruptions
from spotrun.local.demo import drop_manifest, wait_for_job
from spotrun.model.job.record import JobStatus, utc_now
from tests.e2e.conftest import assert_nothing_left_running, example_manifest, read_archived, run_with_chaos

JOBS = 3
STRIKES_PER_JOB = 2
SEED = 2026


def _model(runtime, job) -> bytes:
    [model] = [item for item in job.archive if item.uri.endswith("/model.npy")]
    return read_archived(runtime, model.uri)


def test_concurrent_jobs_survive_random_interruptions_and_deaths(runtime, direct_model):
    # Given three jobs at once, each struck twice at random steps by a warning, a death or a hang
    rng = random.Random(SEED)
    strikes = {
        "interrupt": runtime.interrupt,
        "kill": runtime.kill,
        "hang": lambda instance: runtime.kill(instance, hang=True),
    }
    plans = [
        (
            f"soak-{index}",
            plan_interruptions(STRIKES_PER_JOB, 180, seed=SEED + index, margin=0.15),
            rng.choice(list(strikes)),
        )
        for index in range(JOBS)
    ]

    def run(plan):
        name, steps, kind = plan
        manifest = example_manifest(**{"name: tiny-regression": f"name: {name}"})
        return kind, run_with_chaos(runtime, manifest, f"{name}.yaml", steps, strikes[kind], timeout=300)

    # When they run concurrently
    with ThreadPoolExecutor(max_workers=JOBS) as pool:
        results = list(pool.map(run, plans))

    # Then every job succeeded with the uninterrupted model, after one new attempt per strike
    for kind, job in results:
        assert job.status is JobStatus.SUCCEEDED, (kind, job.error)
        ends = [(attempt.number, attempt.end_reason, attempt.last_step) for attempt in job.attempts]
        assert len(job.attempts) == STRIKES_PER_JOB + 1, (kind, ends)
        assert _model(runtime, job) == direct_model, kind
        assert_nothing_left_running(runtime, job)


def _wait_until(what: str, condition, timeout: float = 60.0):
    """Poll ``condition`` until it returns something true; fail naming ``what`` past ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.1)
    return value


def _record(store, job_id: str, field: str):
    """The job's record once it exists and its ``field`` is set (not None, not empty); else None."""
    job = store.get(job_id)
    return job if job is not None and getattr(job, field) else None


# Both jobs need every spot pool exhausted: they share the outage, one waiting it out, one buying on-demand.
def test_with_spot_exhausted_one_job_waits_for_it_and_one_falls_back_to_on_demand(runtime, direct_model):
    # Given no spot capacity left in any pool
    pools = runtime.capacity.pools()
    for pool in pools:
        runtime.capacity.exhaust(pool.instance_type, pool.availability_zone)
    # and two jobs: one that waits for spot (a wait far shorter than its max_wait_minutes: 30, 36 s at this
    # time scale), one that allows falling back to on-demand
    waiting = example_manifest(
        **{
            "name: tiny-regression": "name: capacity-wait",
            "  spot: true": "  spot: true\n  max_wait_minutes: 30",
        }
    )
    falling_back = example_manifest(
        **{
            "name: tiny-regression": "name: fallback",
            "  spot: true": "  spot: true\n  on_demand_fallback: true",
        }
    )
    store = job_store(runtime.settings.jobs_table, runtime.settings.region)
    try:
        # When both are submitted
        submitted = drop_manifest(runtime, waiting, "capacity-wait.yaml")
        fallback = drop_manifest(runtime, falling_back, "fallback.yaml")
        # and the first has been waiting for capacity a while, the second has its instance
        job = _wait_until(
            "the job never waited for capacity", lambda: _record(store, submitted.job_id, "capacity_wait")
        )
        _wait_until("the fallback job never launched", lambda: _record(store, fallback.job_id, "attempts"))
    finally:
        # and capacity comes back
        for pool in pools:
            runtime.capacity.refill(pool.instance_type, pool.availability_zone)

    # Then the first waited without an instance, and its record says why, pool by pool, in EC2's words
    assert job.status is JobStatus.ACQUIRING
    assert job.attempts == []
    assert {error.code for error in job.capacity_wait.pools} == {"InsufficientInstanceCapacity"}
    assert "waiting for capacity since " in capacity_wait_text(job, utc_now()).plain
    # And it ran to the end on spot capacity once it returned
    job = wait_for_job(runtime, submitted.job_id, timeout=180)
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert [attempt.lifecycle for attempt in job.attempts] == ["spot"]
    assert _model(runtime, job) == direct_model
    # And its wait ended with the instance, noted once on the timeline
    assert job.capacity_wait is None
    assert job.capacity_waited_seconds > 0
    assert sum(1 for change in job.timeline if (change.detail or "").startswith("waiting for capacity")) == 1

    # And the second ran on on-demand capacity, at the on-demand price
    job = wait_for_job(runtime, fallback.job_id, timeout=180)
    assert job.status is JobStatus.SUCCEEDED, job.error
    [attempt] = job.attempts
    assert attempt.lifecycle == "on-demand"
    assert job.cost is not None
    assert job.cost.on_demand_instances == 1
    assert job.cost.on_demand_usd == job.cost.usd > 0
    assert job.cost.savings_pct is None  # nothing was compared: no saving is claimed
    assert attempt.price_source == "on-demand-table"
    assert _model(runtime, job) == direct_model

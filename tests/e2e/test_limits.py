"""budget.max_usd end to end: the job checkpoints before its budget would pass, releases its instance and ends
with Budget.Exceeded, its spend and limit in the record; a new job with a raised budget resumes from it."""

from __future__ import annotations

import pytest

from spotrun.agent import checkpoint_store
from spotrun.local.demo import drop_manifest, wait_for_job
from spotrun.model.job.record import JobStatus
from tests.e2e.conftest import assert_nothing_left_running, example_manifest

PRICE = 0.2  # USD/h, every g4dn.xlarge pool: 60 s (EC2's billing minimum) cost 0.0033 USD
BUDGET = 0.004  # 72 s of that instance; the job stops 10 s (the emulator's margin) before
# The record rounds to 4 decimals (0.5e-4 USD), and its times are read within 2 s of the emulator's when four e2e
# files share 2 cores (1 s of that instance is 0.56e-4 USD; a fresh clone's run once saw the record 1.2 s ahead).
BILLING_TOLERANCE_USD = 1.7e-4


def billed_by_the_emulator(runtime, instance_id: str) -> float:
    """What EC2 bills for the instance, from the emulator's own launch and termination times."""
    held = runtime.capacity.held(instance_id)
    assert held is not None
    launched, ended = held
    assert ended is not None, f"{instance_id} still runs"
    return PRICE * max(60.0, (ended - launched).total_seconds()) / 3600


def test_a_job_stops_at_its_budget_with_its_checkpoint_committed_and_its_instance_released(runtime):
    # Given spot g4dn.xlarge at 0.2 USD/h, and a job that would train for an hour, with a 0.004 USD budget
    for pool in runtime.capacity.pools():
        if pool.instance_type == "g4dn.xlarge":
            runtime.capacity.set_price(pool.instance_type, pool.availability_zone, PRICE)
    manifest = example_manifest(
        **{
            "name: tiny-regression": "name: budget-stop",
            "gpu_names: [t4, a10g, l4]": "instance_types: [g4dn.xlarge]",
            '--step-seconds, "0.02"]': '--step-seconds, "0.02", --steps, "180000"]',
            "tags:": f"budget:\n  max_usd: {BUDGET}\ntags:",
        }
    )

    # When it is dropped
    submitted = drop_manifest(runtime, manifest, "budget-stop.yaml")
    job = wait_for_job(runtime, submitted.job_id, timeout=240)

    # Then it ended with Budget.Exceeded, not relaunched, its spend within the limit, both in the record
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.type == "Budget.Exceeded", job.error
    [attempt] = job.attempts
    assert attempt.price_per_hour == PRICE
    assert job.limits is not None
    assert job.limits.max_usd == BUDGET
    # and the budget held by EC2's own account: the emulator's launch and termination of the instance, billed
    # per second with the 60-second minimum, cost no more than the budget, and the record says what they cost
    ec2_usd = billed_by_the_emulator(runtime, attempt.instance_id)
    assert ec2_usd <= BUDGET
    assert job.limits.spent_usd == pytest.approx(ec2_usd, abs=BILLING_TOLERANCE_USD)
    assert job.cost is not None
    assert job.cost.usd == pytest.approx(ec2_usd, abs=BILLING_TOLERANCE_USD)
    assert job.error.details[0] == f"spent {job.limits.spent_usd:.4f} USD of budget.max_usd {BUDGET:g} USD"
    # and it trained past the 60-second billing minimum less the margin: the stop came from the budget
    assert job.limits.training_seconds > 30
    # and the checkpoint taken on the stop is committed, ready for a resumed run
    committed = checkpoint_store.latest_committed(
        runtime.client("s3"), runtime.settings.jobs_bucket, submitted.job_id
    )
    assert committed is not None
    assert committed.step > 0
    assert "checkpoint step" in job.error.message
    # and its instance is released
    assert_nothing_left_running(runtime, job)

    # When the job is submitted again with a raised budget, resuming from the stopped one, to end soon after
    resumed = example_manifest(
        **{
            "name: tiny-regression": "name: budget-resumed",
            '--step-seconds, "0.02"]': f'--step-seconds, "0.02", --steps, "{committed.step + 50}"]',
            "tags:": f"budget:\n  max_usd: {BUDGET * 10}\ntags:",
            "  restarts_on_error: 1": f"  restarts_on_error: 1\n  resume_from: {submitted.job_id}",
        }
    )
    again = wait_for_job(runtime, drop_manifest(runtime, resumed, "budget-resumed.yaml").job_id, timeout=240)

    # Then it started from the committed checkpoint and succeeded
    assert again.status is JobStatus.SUCCEEDED, again.error
    assert again.attempts[0].restored_step == committed.step
    # and its cost is what EC2 billed for its instances
    assert again.cost is not None
    assert again.cost.usd == pytest.approx(
        sum(billed_by_the_emulator(runtime, i) for i in again.instance_ids()), abs=BILLING_TOLERANCE_USD
    )
    assert_nothing_left_running(runtime, again)

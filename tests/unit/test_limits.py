"""budget.max_usd and max_runtime_minutes over all attempts: admission, acquire, standby, train step, record."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from spotrun.aws.settings import Settings
from spotrun.control.capacity.acquire import acquire_instance
from spotrun.control.capacity.ec2_events import on_interruption_warning
from spotrun.control.capacity.interruptions import record_interruption
from spotrun.control.dispatch import dispatch_agent_step
from spotrun.control.store import update_job
from spotrun.control.submission import admission_problems
from spotrun.model.agent_protocol.command import FailureCause
from spotrun.model.errors import BudgetExceeded, MaxRuntimeExceeded
from spotrun.model.job.limits import next_attempt_refusal, training_seconds_used
from spotrun.model.job.record import JobStatus, ManifestSource, new_job, transition
from spotrun.model.manifest.parse import parse_manifest_text
from spotrun.model.timing import workflow_timing
from tests.unit.fakes import FakeCommands, FakeCompute, FakeObjects, InMemoryJobStore

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
BUCKET = "jobs-bucket"
SETTINGS = Settings(
    region="us-east-1",
    jobs_table="jobs",
    jobs_bucket=BUCKET,
    agent_document_name="spotrun-agent-run",
    launch_template_name="spotrun-agent",
    subnet_ids=("subnet-a", "subnet-b"),
)
# g4dn.xlarge, the only t4 candidate of one GPU, is 0.526 USD/h on demand.
G4DN_ON_DEMAND = 0.526
PRICE = 0.2  # what FakeCompute's spot pools cost, USD/h


def manifest(*, max_usd: float | None = None, spot: bool = True, max_runtime_minutes: int = 30):
    budget = "" if max_usd is None else f"budget: {{max_usd: {max_usd}}}\n"
    return parse_manifest_text(
        f"name: tiny\nresources: {{gpu_names: [t4], gpus_per_node: 1}}\ncapacity: {{spot: {str(spot).lower()}}}\n"
        f"training: {{command: [python, t.py], max_runtime_minutes: {max_runtime_minutes}}}\n{budget}"
    )


def submitted(store, document):
    job = new_job(
        "tiny-0123456789ab",
        "tiny",
        ManifestSource(bucket="b", key="k", etag="e"),
        document.model_dump(mode="json"),
        T0,
    )
    store.create(job)
    return job


def acquire(store, compute, now, document):
    return acquire_instance(
        job_id="tiny-0123456789ab",
        store=store,
        compute=compute,
        subnet_ids=SETTINGS.subnet_ids,
        launch_template_name="spotrun-agent",
        timing=workflow_timing(document, 1.0),
        now=now,
    )


def to(store, status, at):
    update_job(store, "tiny-0123456789ab", lambda current: transition(current, status, at))


def interrupt(store, compute, at):
    record_interruption(
        job_id="tiny-0123456789ab",
        error={"Error": "Spot.Interrupted", "Cause": FailureCause(message="notice").model_dump_json()},
        store=store,
        compute=compute,
        objects=FakeObjects(),
        jobs_bucket=BUCKET,
        now=at,
    )


def dispatch(store, step, now, document, time_scale=1.0):
    objects = FakeObjects()
    dispatch_agent_step(
        job_id="tiny-0123456789ab",
        step=step,
        task_token="token",
        timing=workflow_timing(document, time_scale),
        staged=None,
        store=store,
        objects=objects,
        commands=FakeCommands(),
        settings=Settings(
            region="us-east-1",
            jobs_bucket=BUCKET,
            agent_document_name="spotrun-agent-run",
            agent_report_url="https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com/v1/agent/reports",
        ),
        now=now,
    )
    [body] = objects.objects.values()
    return json.loads(body)


def trained_attempt(store, compute, document, start, train_minutes):
    """Acquire, stage and train an attempt from ``start`` for ``train_minutes``, then interrupt it."""
    acquire(store, compute, start, document)
    to(store, JobStatus.STAGING, start + timedelta(minutes=1))
    to(store, JobStatus.TRAINING, start + timedelta(minutes=2))
    interrupt(store, compute, start + timedelta(minutes=2 + train_minutes))


# -- admission ----------------------------------------------------------------------------------------------


def test_a_budget_below_one_boot_of_the_cheapest_spot_pool_is_refused_at_submission():
    # Given a spot job: its cheapest boot is 60 s of g4dn.xlarge at the lowest spot price (10 % of on-demand)
    minimum = G4DN_ON_DEMAND * 0.10 * 60 / 3600
    # When its budget is just below, then just above that
    refused = admission_problems(manifest(max_usd=round(minimum * 0.9, 6)), archive_buckets=())
    accepted = admission_problems(manifest(max_usd=round(minimum * 1.1, 6)), archive_buckets=())
    # Then only the first is refused, naming the field, the type and the minimum
    assert len(refused) == 1
    assert refused[0].startswith("budget.max_usd:")
    assert "g4dn.xlarge" in refused[0]
    assert f"{minimum:.4f}" in refused[0]
    assert accepted == []


def test_an_on_demand_job_is_refused_when_its_budget_cannot_pay_one_on_demand_boot():
    # Given a budget that pays a spot boot of g4dn.xlarge but not an on-demand one
    budget = G4DN_ON_DEMAND * 0.5 * 60 / 3600
    # When the job buys on-demand from the start, or spot
    on_demand = admission_problems(manifest(max_usd=round(budget, 6), spot=False), archive_buckets=())
    spot = admission_problems(manifest(max_usd=round(budget, 6), spot=True), archive_buckets=())
    # Then only the on-demand job is refused
    assert [line.split(":")[0] for line in on_demand] == ["budget.max_usd"]
    assert "on-demand" in on_demand[0]
    assert spot == []


# -- acquire and standby ------------------------------------------------------------------------------------


def test_acquire_refuses_an_attempt_the_remaining_budget_cannot_boot():
    # Given a spot job that spent 0.0060 USD of 0.0062 on its first attempt (18 minutes... at 0.2 USD/h: 108 s)
    document = manifest(max_usd=0.0062)
    store, compute = InMemoryJobStore(), FakeCompute(price=PRICE)
    submitted(store, document)
    acquire(store, compute, T0, document)
    to(store, JobStatus.STAGING, T0 + timedelta(seconds=20))
    to(store, JobStatus.TRAINING, T0 + timedelta(seconds=40))
    interrupt(store, compute, T0 + timedelta(seconds=108))
    requests = len(compute.fleet_requests)
    # When the workflow asks for the next attempt: 0.0002 USD left, a spot boot needs 0.000877
    with pytest.raises(BudgetExceeded) as raised:
        acquire(store, compute, T0 + timedelta(seconds=120), document)
    # Then nothing was launched and the message gives the spend and the limit
    assert len(compute.fleet_requests) == requests
    assert "0.0060 USD of its 0.0062 USD" in str(raised.value)


def test_acquire_refuses_an_attempt_once_the_attempts_together_trained_for_max_runtime():
    # Given a 30-minute job interrupted twice after 16 minutes of training each (32 minutes in all)
    document = manifest(max_runtime_minutes=30)
    store, compute = InMemoryJobStore(), FakeCompute()
    submitted(store, document)
    trained_attempt(store, compute, document, T0, 16)
    trained_attempt(store, compute, document, T0 + timedelta(minutes=20), 16)
    requests = len(compute.fleet_requests)
    # When the workflow asks for a third attempt
    with pytest.raises(MaxRuntimeExceeded) as raised:
        acquire(store, compute, T0 + timedelta(minutes=40), document)
    # Then nothing was launched
    assert len(compute.fleet_requests) == requests
    assert "1920 s over 2 attempt(s)" in str(raised.value)


@pytest.mark.parametrize(
    ("max_usd", "launched"),
    [
        # 108 s at 0.2 USD/h spent 0.0060: the 0.0002 USD left cannot pay a spot g4dn.xlarge's 60-s minimum
        (0.0062, False),
        # the positive control: the same warning with a budget that can pay it launches the standby
        (0.05, True),
    ],
)
def test_no_standby_is_launched_that_the_remaining_budget_cannot_boot(max_usd: float, launched: bool):
    # Given a job training on its first attempt, which by the warning has spent 0.0060 USD of its budget
    document = manifest(max_usd=max_usd)
    store, compute = InMemoryJobStore(), FakeCompute(price=PRICE)
    submitted(store, document)
    attempt = acquire(store, compute, T0, document)
    compute.states[attempt.instance_id] = "running"
    to(store, JobStatus.STAGING, T0)
    to(store, JobStatus.TRAINING, T0)
    warned_at = T0 + timedelta(seconds=108)
    # When the interruption warning arrives 108 s after launch
    outcome = on_interruption_warning(
        instance_id=attempt.instance_id,
        store=store,
        compute=compute,
        objects=FakeObjects(),
        commands=FakeCommands(),
        settings=SETTINGS,
        now=warned_at,
    )
    # Then a standby was launched only where the budget left pays for one
    assert (outcome.standby_instance_id is not None) == launched
    assert len(compute.fleet_requests) == (2 if launched else 1)
    # and where none was, the reason is the budget: what the next attempt would be refused for
    refusal = next_attempt_refusal(store.get("tiny-0123456789ab"), interruptions=1, now=warned_at)
    if launched:
        assert refusal is None
    else:
        assert isinstance(refusal, BudgetExceeded)
        assert "has spent 0.0060 USD of its 0.0062 USD budget.max_usd" in str(refusal)


# -- the train step -----------------------------------------------------------------------------------------


def test_the_train_command_stops_where_the_budget_runs_out_at_this_attempts_price_less_the_margin():
    # Given a 0.05 USD job whose first attempt ran 36 s at 0.2 USD/h, billed as 60 s: 0.0033 USD
    document = manifest(max_usd=0.05)
    store, compute = InMemoryJobStore(), FakeCompute(price=PRICE)
    submitted(store, document)
    acquire(store, compute, T0, document)
    interrupt(store, compute, T0 + timedelta(seconds=36))
    # and a second attempt launched at T0 + 100 s, staged 30 s later
    second = acquire(store, compute, T0 + timedelta(seconds=100), document)
    to(store, JobStatus.STAGING, T0 + timedelta(seconds=110))
    # When its train step is sent
    command = dispatch(store, "train", T0 + timedelta(seconds=130), document)
    # Then it must stop when the 0.0467 USD left is spent at 0.2 USD/h from its launch, less the 120 s margin
    first_cost = PRICE * 60 / 3600
    affordable = (0.05 - round(first_cost, 4)) * 3600 / PRICE
    expected = second.started_at + timedelta(seconds=affordable - 120)
    assert datetime.fromisoformat(command["stop_at"]) == expected
    assert command["stop_grace_seconds"] == 72.0


def test_a_job_without_a_budget_has_no_stop_time():
    # Given a job without budget, staged
    document = manifest()
    store, compute = InMemoryJobStore(), FakeCompute()
    submitted(store, document)
    acquire(store, compute, T0, document)
    to(store, JobStatus.STAGING, T0)
    # When its train step is sent
    command = dispatch(store, "train", T0, document)
    # Then only the runtime allowance limits it
    assert command["stop_at"] is None
    assert command["max_runtime_seconds"] == 30 * 60


def test_a_train_step_the_budget_can_no_longer_reach_is_refused_before_it_starts():
    # Given a 0.0062 USD job whose attempt booted and staged for 110 s at 0.2 USD/h (0.0061 USD)
    document = manifest(max_usd=0.0062)
    store, compute = InMemoryJobStore(), FakeCompute(price=PRICE)
    submitted(store, document)
    acquire(store, compute, T0, document)
    to(store, JobStatus.STAGING, T0 + timedelta(seconds=10))
    # When the train step is to be sent
    with pytest.raises(BudgetExceeded):
        dispatch(store, "train", T0 + timedelta(seconds=110), document)
    # Then it was not recorded as training
    assert store.get("tiny-0123456789ab").status is JobStatus.STAGING


def test_staging_is_not_started_once_booting_used_up_the_budget():
    # Given a 0.0062 USD job (111.6 s at 0.2 USD/h), in the emulator, where the margin is 10 s
    document = manifest(max_usd=0.0062)
    store, compute = InMemoryJobStore(), FakeCompute(price=PRICE)
    submitted(store, document)
    acquire(store, compute, T0, document)
    # When the stage step is to be sent 110 s after launch
    with pytest.raises(BudgetExceeded):
        dispatch(store, "stage", T0 + timedelta(seconds=110), document, time_scale=0.02)
    # Then it was refused; 10 s after launch, it is sent
    assert store.get("tiny-0123456789ab").status is JobStatus.BOOTING
    assert dispatch(store, "stage", T0 + timedelta(seconds=10), document, time_scale=0.02)["step"] == "stage"


def test_the_train_step_gets_what_the_earlier_attempts_left_of_max_runtime_in_real_seconds():
    # Given a 30-minute job whose first attempt trained 20 minutes before it was interrupted
    document = manifest(max_runtime_minutes=30)
    store, compute = InMemoryJobStore(), FakeCompute()
    submitted(store, document)
    trained_attempt(store, compute, document, T0, 20)
    acquire(store, compute, T0 + timedelta(minutes=25), document)
    to(store, JobStatus.STAGING, T0 + timedelta(minutes=26))
    # When the second attempt's train step is sent, in the emulator's scaled time
    command = dispatch(store, "train", T0 + timedelta(minutes=27), document, time_scale=0.02)
    # Then it may train the 10 minutes left, unscaled
    assert command["max_runtime_seconds"] == 10 * 60


def test_a_train_step_with_no_runtime_left_is_refused():
    # Given a 30-minute job that has been in TRAINING for 31 minutes on its attempt
    document = manifest(max_runtime_minutes=30)
    store, compute = InMemoryJobStore(), FakeCompute()
    submitted(store, document)
    acquire(store, compute, T0, document)
    to(store, JobStatus.STAGING, T0)
    to(store, JobStatus.TRAINING, T0)
    # When the train step is sent again (a redelivered step, a late retry)
    with pytest.raises(MaxRuntimeExceeded):
        dispatch(store, "train", T0 + timedelta(minutes=31), document)
    # Then the used time is the attempt's real training time
    assert training_seconds_used(store.get("tiny-0123456789ab"), T0 + timedelta(minutes=31)) == 31 * 60

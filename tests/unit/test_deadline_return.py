"""A deadline job on on-demand goes back to spot when its slack and the price pay for the trip, and spot is had.

The heartbeat (the API) asks, on the bus; :func:`return_to_spot` (the ``deadline_return`` function) asks EC2
for spot and moves the job only once it has an instance for it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from spotrun.control.capacity.acquire import acquire_instance
from spotrun.control.capacity.deadline_moves import redecide_while_training
from spotrun.control.capacity.spot_return import return_to_spot
from spotrun.control.store import update_job
from spotrun.model.deadline.state import Choice
from spotrun.model.errors import CapacityUnavailable
from spotrun.model.job.bus_events import RETURN_TO_SPOT, ReturnToSpot
from spotrun.model.job.record import JobStatus, ManifestSource, new_job, transition
from spotrun.model.manifest.parse import parse_manifest_document
from spotrun.model.timing import workflow_timing
from tests.unit.fakes import FakeCommands, FakeCompute, FakeEvents, FakeObjects, InMemoryJobStore
from tests.unit.test_deadline_moves import JOB, SETTINGS, T0, notice_answered, training_on_spot

# 2 h of work due in 3 h. With no spot at submission the policy waits (slack 0.83 h, above its 0.75 h reserve);
# six minutes later it buys on-demand (slack 0.73 h); on on-demand the slack is 0.83 h (no changeover ahead),
# above the 0.23 h a return needs (two changeovers and the 0.03 h margin: a move onto spot saves first, so a
# preemption before the next decision could take at most a minute's work, seen a minute late).


def deadline_manifest(deadline: str = "3h"):
    return parse_manifest_document(
        {
            "name": "tiny",
            "resources": {"gpu_names": ["a10g"]},
            "capacity": {"deadline": deadline},
            "training": {"command": ["python", "t.py"], "expected_hours": 2.0},
        }
    )


ON_DEMAND_AT = T0 + timedelta(minutes=6)


def acquire(store, compute, now: datetime):
    return acquire_instance(
        job_id=JOB,
        store=store,
        compute=compute,
        subnet_ids=SETTINGS.subnet_ids,
        launch_template_name="spotrun-agent",
        timing=workflow_timing(deadline_manifest(), 1.0),
        now=now,
    )


def training_on_demand(deadline: str = "3h", waits: bool = True):
    """The deadline job on on-demand since ``ON_DEMAND_AT``, spot missing from submission: ``(store, compute)``.

    ``waits``: the policy waits for spot at submission; else the first acquisition is at ``ON_DEMAND_AT``.
    """
    manifest = deadline_manifest(deadline)
    store, compute = InMemoryJobStore(), FakeCompute()
    store.create(new_job(JOB, "tiny", ManifestSource(bucket="b", key="k"), manifest, T0))
    compute.spot_unavailable = True
    if waits:
        with pytest.raises(CapacityUnavailable):
            acquire(store, compute, T0)
    assert acquire(store, compute, ON_DEMAND_AT).lifecycle == "on-demand"
    update_job(store, JOB, lambda current: transition(current, JobStatus.STAGING, ON_DEMAND_AT))
    update_job(store, JOB, lambda current: transition(current, JobStatus.TRAINING, ON_DEMAND_AT))
    compute.fleet_requests.clear()
    return store, compute


def heartbeat(store, events, now: datetime):
    return redecide_while_training(
        JOB,
        store=store,
        objects=FakeObjects(),
        commands=FakeCommands(),
        events=events,
        settings=SETTINGS,
        now=now,
    )


def deliver(store, compute, commands, now: datetime, attempt: int = 1):
    return return_to_spot(
        ReturnToSpot(job_id=JOB, attempt=attempt),
        store=store,
        compute=compute,
        objects=FakeObjects(),
        commands=commands,
        settings=SETTINGS,
        now=now,
    )


def test_on_demand_with_slack_for_the_trip_the_heartbeat_asks_for_spot_and_changes_nothing() -> None:
    # Given the job on on-demand with the slack a return needs
    store, _ = training_on_demand()
    before = store.get(JOB)
    events = FakeEvents()
    # When its agent reports
    decision = heartbeat(store, events, ON_DEMAND_AT + timedelta(minutes=1))
    # Then the return is asked for on the bus, for this attempt, and nothing is recorded or marked yet
    assert decision.choice is Choice.SPOT
    assert decision.slack_hours == pytest.approx(0.8333, abs=1e-4)
    assert events.published == [(RETURN_TO_SPOT, {"job_id": JOB, "attempt": 1})]
    after = store.get(JOB)
    assert after.deadline_decisions == before.deadline_decisions
    assert after.current_attempt.notice_at is None


def test_on_demand_without_slack_for_the_trip_the_heartbeat_asks_nothing() -> None:
    # Given the job on on-demand with a deadline 40 minutes nearer (on-demand from its first acquisition, at 6
    # minutes): slack 0.17 h, below the 0.23 h a return needs
    store, _ = training_on_demand("140m", waits=False)
    events = FakeEvents()
    # When its agent reports, Then it stays on on-demand and nothing is asked
    decision = heartbeat(store, events, ON_DEMAND_AT + timedelta(minutes=1))
    assert decision.choice is Choice.ON_DEMAND
    assert decision.slack_hours == pytest.approx(1 / 6)
    assert events.published == []


def test_with_spot_back_the_request_launches_it_moves_the_job_and_the_next_attempt_adopts_it() -> None:
    # Given the job on on-demand, and spot back
    store, compute = training_on_demand()
    compute.spot_unavailable = False
    commands = FakeCommands()
    now = ON_DEMAND_AT + timedelta(minutes=1)
    # When the return's request arrives
    decision = deliver(store, compute, commands, now)
    # Then a spot instance is launched as the standby, the on-demand attempt gets the notice, marked as a move,
    # and the record has the decision to go back to spot
    assert decision.choice is Choice.SPOT
    (request,) = compute.fleet_requests
    assert request["TargetCapacitySpecification"]["DefaultTargetCapacityType"] == "spot"
    job = store.get(JOB)
    # (in any pool: the on-demand instance's own is no spot pool that was reclaimed)
    pools = {
        (override["InstanceType"], compute.zones[override["SubnetId"]])
        for override in request["LaunchTemplateConfigs"][0]["Overrides"]
    }
    assert (job.current_attempt.instance_type, job.current_attempt.availability_zone) in pools
    assert job.standby.lifecycle == "spot"
    assert job.current_attempt.deadline_move
    assert job.current_attempt.notice_at == now
    ((_, instance, uri),) = commands.sent
    assert instance == job.current_attempt.instance_id
    assert uri.endswith("-notice.json")
    assert [d.choice for d in job.deadline_decisions] == ["wait", "on-demand", "spot"]
    # and when the agent's answer ends the attempt and the workflow acquires, the move is no interruption and the
    # next attempt runs on the standby
    record = notice_answered(store, compute, now + timedelta(minutes=1))
    assert record.reason == "deadline-move"
    attempt = acquire(store, compute, now + timedelta(minutes=2))
    assert (attempt.instance_id, attempt.lifecycle) == (job.standby.instance_id, "spot")
    job = store.get(JOB)
    assert job.interruptions == 0
    assert job.standby is None
    assert "(launched for the return to spot)" in job.timeline[-1].detail


def test_with_spot_still_gone_the_request_leaves_the_job_on_on_demand() -> None:
    # Given the job on on-demand, spot still gone
    store, compute = training_on_demand()
    before = store.get(JOB)
    commands = FakeCommands()
    # When the return's request arrives
    decision = deliver(store, compute, commands, ON_DEMAND_AT + timedelta(minutes=1))
    # Then EC2 was asked for spot only (never a second on-demand instance), and nothing changed: no standby, no
    # notice, no decision recorded
    assert decision.choice is Choice.ON_DEMAND
    assert [
        r["TargetCapacitySpecification"]["DefaultTargetCapacityType"] for r in compute.fleet_requests
    ] == ["spot"]
    assert commands.sent == []
    assert store.get(JOB) == before


def test_a_request_delivered_twice_or_outlived_moves_the_job_once() -> None:
    # Given the job on on-demand, spot back
    store, compute = training_on_demand()
    compute.spot_unavailable = False
    commands = FakeCommands()
    now = ON_DEMAND_AT + timedelta(minutes=1)
    # When one for another attempt arrives, then the request twice
    other = deliver(store, compute, commands, now, attempt=2)
    first = deliver(store, compute, commands, now)
    second = deliver(store, compute, commands, now + timedelta(seconds=5))
    # Then one spot instance, one notice: the other found its attempt not open, the second delivery the notice given
    assert first.choice is Choice.SPOT
    assert second is None
    assert other is None
    assert len(compute.fleet_requests) == 1
    assert len(commands.sent) == 1


def test_a_delivery_that_stopped_after_the_launch_is_finished_by_the_next_with_the_same_standby() -> None:
    # Given a first delivery that launched the spot standby and stopped before the move (its Lambda timed out)
    store, compute = training_on_demand()
    compute.spot_unavailable = False
    commands = FakeCommands()
    deliver(store, compute, commands, ON_DEMAND_AT + timedelta(minutes=1))
    update_job(
        store,
        JOB,
        lambda current: current.with_current_attempt(
            current.current_attempt.model_copy(update={"notice_at": None, "deadline_move": False})
        ),
    )
    standby = store.get(JOB).standby
    # When EventBridge delivers the request again
    decision = deliver(store, compute, commands, ON_DEMAND_AT + timedelta(minutes=2))
    # Then the job moves onto that standby: no second launch
    assert decision.choice is Choice.SPOT
    assert len(compute.fleet_requests) == 1
    assert store.get(JOB).standby == standby
    assert store.get(JOB).current_attempt.deadline_move


def test_a_request_the_policy_no_longer_backs_launches_nothing() -> None:
    # Given the job on on-demand without the slack a return needs, and spot there
    store, compute = training_on_demand("140m", waits=False)
    compute.spot_unavailable = False
    commands = FakeCommands()
    # When a request to return arrives all the same (the slack shrank since the heartbeat asked)
    decision = deliver(store, compute, commands, ON_DEMAND_AT + timedelta(minutes=1))
    # Then the policy, asked again, keeps it on on-demand: no launch, no notice
    assert decision.choice is Choice.ON_DEMAND
    assert compute.fleet_requests == []
    assert commands.sent == []


def test_without_a_bus_the_heartbeat_on_on_demand_decides_and_asks_nothing() -> None:
    # Given the job on on-demand with the slack for a return, in a deployment without a bus
    store, _ = training_on_demand()
    # When its agent reports, Then the decision is taken and nothing fails: the return cannot be asked for
    assert heartbeat(store, None, ON_DEMAND_AT + timedelta(minutes=1)).choice is Choice.SPOT
    assert store.get(JOB).current_attempt.notice_at is None


def test_a_request_for_a_job_on_spot_does_nothing() -> None:
    # Given a deadline job training on spot
    store, compute = training_on_spot()
    commands = FakeCommands()
    # When a request to return its attempt to spot arrives (forged, or crossed with a move)
    decision = deliver(store, compute, commands, T0 + timedelta(minutes=5))
    # Then nothing is launched or sent
    assert decision is None
    assert len(compute.fleet_requests) == 1  # its own acquisition's
    assert commands.sent == []

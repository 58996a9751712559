"""Unit tests of the interruption use cases over fakes: warnings, replacements, the steps lost, the limits."""

import logging
import threading
import time
from datetime import timedelta

import pytest

from spotrun.control.capacity.ec2_events import on_instance_state
from spotrun.control.capacity.interruptions import record_interruption
from spotrun.model.agent_protocol.command import FailureCause
from spotrun.model.errors import InterruptionsExceeded
from spotrun.model.job.record import JobStatus
from spotrun.model.layout import commit_marker_key, progress_key
from tests.unit.fakes import FakeCommands, FakeObjects, FakeWorkflows
from tests.unit.interruption_world import (
    BUCKET,
    T0,
    acquire,
    interrupt_and_relaunch,
    job_in_training,
    warn,
)


@pytest.fixture
def world():
    return job_in_training()


def test_a_warning_is_acted_on_once_however_often_it_arrives(world):
    # Given a training job on a spot instance
    store, compute, attempt = world
    commands = FakeCommands()
    # When the warning arrives three times
    outcomes = [warn(store, compute, attempt.instance_id, commands=commands) for _ in range(3)]
    # Then the first records the notice, tells the agent and launches one replacement; the others do nothing
    assert outcomes[0].action == "warning recorded"
    assert outcomes[0].standby_instance_id is not None
    assert all(outcome.action.startswith("ignored") for outcome in outcomes[1:])
    assert [instance for _, instance, _ in commands.sent] == [attempt.instance_id]
    assert len(compute.fleet_requests) == 2  # the first attempt's and the one replacement
    job = store.get("tiny-0123456789ab")
    assert job.current_attempt.notice_at == T0 + timedelta(minutes=5)
    assert job.standby.instance_id == outcomes[0].standby_instance_id


def test_the_replacement_avoids_the_pool_being_reclaimed(world):
    # Given a job on g4dn.xlarge in one zone
    store, compute, attempt = world
    # When its warning arrives
    warn(store, compute, attempt.instance_id)
    # Then the replacement's request offers no override in that pool
    overrides = compute.fleet_requests[-1]["LaunchTemplateConfigs"][0]["Overrides"]
    reclaimed_subnet = next(s for s, z in compute.zones.items() if z == attempt.availability_zone)
    assert all(
        (item["InstanceType"], item["SubnetId"]) != (attempt.instance_type, reclaimed_subnet)
        for item in overrides
    )


def test_the_next_attempt_adopts_the_standby_instead_of_launching(world):
    # Given a warned job with a standby, whose interruption was recorded
    store, compute, attempt = world
    standby = warn(store, compute, attempt.instance_id).standby_instance_id
    record_interruption(
        job_id="tiny-0123456789ab",
        error={
            "Error": "Spot.Interrupted",
            "Cause": FailureCause(message="notice", last_step=10).model_dump_json(),
        },
        store=store,
        compute=compute,
        objects=FakeObjects(),
        jobs_bucket=BUCKET,
        now=T0 + timedelta(minutes=6),
    )
    requests_before = len(compute.fleet_requests)
    # When the workflow acquires capacity again
    second = acquire(store, compute, T0 + timedelta(minutes=6))
    # Then it gets the standby as attempt 2 and nothing new is launched
    assert second.instance_id == standby
    assert second.number == 2
    assert len(compute.fleet_requests) == requests_before
    job = store.get("tiny-0123456789ab")
    assert job.standby is None
    assert job.status is JobStatus.BOOTING


def test_recording_an_interruption_measures_the_steps_lost_and_releases_the_instance(world):
    # Given a job that committed the checkpoint of step 100 and reached step 137 before its notice
    store, compute, attempt = world
    objects = FakeObjects()
    objects.put_json(BUCKET, commit_marker_key("tiny-0123456789ab", 100), {"step": 100})
    objects.put_json(BUCKET, progress_key("tiny-0123456789ab", 1), {"step": 137})
    # When the workflow records an interruption without a cause (a silent death: heartbeat timeout)
    record = record_interruption(
        job_id="tiny-0123456789ab",
        error={"Error": "States.HeartbeatTimeout", "Cause": ""},
        store=store,
        compute=compute,
        objects=objects,
        jobs_bucket=BUCKET,
        now=T0 + timedelta(minutes=7),
    )
    # Then the loss is what progress reported beyond the last committed checkpoint
    assert (record.reason, record.last_step, record.resume_from_step, record.steps_lost) == (
        "heartbeat-timeout",
        137,
        100,
        37,
    )
    job = store.get("tiny-0123456789ab")
    assert job.status is JobStatus.INTERRUPTED
    [closed] = job.attempts
    assert (closed.end_reason, closed.steps_lost, closed.last_step) == ("heartbeat-timeout", 37, 137)
    assert compute.states[attempt.instance_id] == "terminated"
    assert job.task_token is None


def test_a_notice_that_cannot_reach_the_agent_is_logged_and_the_replacement_still_launches(world, caplog):
    # Given SSM refusing the command to the warned instance
    store, compute, attempt = world

    class RefusingCommands(FakeCommands):
        def run_agent(self, document_name: str, instance_id: str, command_uri: str) -> str:
            raise RuntimeError("InvalidInstanceId")

    # When the warning arrives
    with caplog.at_level(logging.WARNING, logger="spotrun.control.capacity.ec2_events"):
        outcome = warn(store, compute, attempt.instance_id, commands=RefusingCommands())
    # Then the warning is recorded and the replacement launched, and the failure is logged with the job
    assert outcome.action == "warning recorded"
    assert outcome.standby_instance_id is not None
    [logged] = [r for r in caplog.records if r.name == "spotrun.control.capacity.ec2_events"]
    assert logged.levelno == logging.WARNING
    assert "tiny-0123456789ab" in logged.getMessage()
    assert "InvalidInstanceId" in logged.getMessage()


def test_an_attempt_that_reported_no_step_is_logged_and_loses_an_unknown_number(world, caplog):
    # Given an interrupted attempt whose script never wrote its progress
    store, compute, _ = world
    # When the workflow records the interruption
    with caplog.at_level(logging.WARNING, logger="spotrun.control.capacity.interruptions"):
        record = record_interruption(
            job_id="tiny-0123456789ab",
            error={"Error": "States.HeartbeatTimeout", "Cause": ""},
            store=store,
            compute=compute,
            objects=FakeObjects(),
            jobs_bucket=BUCKET,
            now=T0 + timedelta(minutes=7),
        )
    # Then the steps lost are unknown, and the log says why, with the job
    assert (record.last_step, record.steps_lost) == (None, None)
    [logged] = [r for r in caplog.records if r.name == "spotrun.control.capacity.interruptions"]
    assert logged.levelno == logging.WARNING
    assert "tiny-0123456789ab" in logged.getMessage()


def test_one_interruption_too_many_fails_the_job(world):
    # Given a job allowed two interruptions, interrupted twice already
    store, compute, _ = world
    for number in range(2):
        record_interruption(
            job_id="tiny-0123456789ab",
            error={"Error": "Spot.Interrupted", "Cause": "{}"},
            store=store,
            compute=compute,
            objects=FakeObjects(),
            jobs_bucket=BUCKET,
            now=T0 + timedelta(minutes=10 + number),
        )
        acquire(store, compute, T0 + timedelta(minutes=10 + number))
    # When the third interruption is recorded
    # Then it is refused with the error the workflow fails on
    with pytest.raises(InterruptionsExceeded, match="interrupted 3 times"):
        record_interruption(
            job_id="tiny-0123456789ab",
            error={"Error": "Spot.Interrupted", "Cause": "{}"},
            store=store,
            compute=compute,
            objects=FakeObjects(),
            jobs_bucket=BUCKET,
            now=T0 + timedelta(minutes=20),
        )


def test_a_terminated_instance_fails_its_open_step_once(world):
    # Given a training job whose instance dies without notice
    store, _, attempt = world
    workflows = FakeWorkflows()
    # When the terminated and then a duplicated shutting-down event arrive
    first = on_instance_state(
        instance_id=attempt.instance_id, state="terminated", store=store, workflows=workflows, now=T0
    )
    second = on_instance_state(
        instance_id=attempt.instance_id, state="shutting-down", store=store, workflows=workflows, now=T0
    )
    # Then the open step is failed once, as a lost instance
    assert first.action == "agent step failed: instance lost"
    assert second.action == "ignored: the agent step had already ended"
    [(token, error, _)] = workflows.failed
    assert (token, error) == ("token-1", "Instance.Lost")


def test_events_for_unknown_or_old_instances_change_nothing(world):
    store, compute, _ = world
    workflows = FakeWorkflows()
    assert warn(store, compute, "i-unknown").action.startswith("ignored")
    assert on_instance_state(
        instance_id="i-unknown", state="terminated", store=store, workflows=workflows, now=T0
    ).action.startswith("ignored")
    assert workflows.failed == []


def test_concurrent_deliveries_of_one_warning_launch_one_replacement(world):
    # Given a training job, and its warning delivered eight times at once (EventBridge is at-least-once),
    # over a store as slow to read as DynamoDB, so the deliveries really overlap
    store, compute, attempt = world
    read = store.get
    store.get = lambda job_id: (time.sleep(0.01), read(job_id))[1]
    barrier = threading.Barrier(8)
    outcomes = []

    def deliver():
        barrier.wait()
        outcomes.append(warn(store, compute, attempt.instance_id))

    threads = [threading.Thread(target=deliver) for _ in range(8)]
    # When they race
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then exactly one acted, and one replacement was launched
    assert [outcome.action for outcome in outcomes].count("warning recorded") == 1
    assert len(compute.fleet_requests) == 2


def test_no_replacement_is_launched_when_the_warned_interruption_is_one_too_many(world):
    # Given a job allowed two interruptions that has had two, training on its third instance
    store, compute, _ = world
    third = interrupt_and_relaunch(store, compute, 2)
    launched = len(compute.fleet_requests)
    # When that instance is warned
    outcome = warn(store, compute, third.instance_id)
    # Then no replacement is launched: the job will fail on this interruption, it could never use one
    assert len(compute.fleet_requests) == launched
    assert outcome.standby_instance_id is None
    assert outcome.action == "warning recorded; no replacement: max_interruptions spent"
    assert store.get("tiny-0123456789ab").standby is None


def test_a_replacement_is_still_launched_while_interruptions_remain(world):
    # Given a job allowed two interruptions that has had one
    store, compute, _ = world
    second = interrupt_and_relaunch(store, compute, 1)
    # When its instance is warned
    outcome = warn(store, compute, second.instance_id)
    # Then a replacement is launched, since the next attempt can use it
    assert outcome.standby_instance_id is not None

"""Readiness (EC2 running and SSM online) and EC2's eventual consistency: no instance lost, none orphaned."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from spotrun.control.capacity.acquire import acquire_instance
from spotrun.control.capacity.readiness import EC2_CONSISTENCY_GRACE, await_ready, check_ready
from spotrun.control.capacity.release import release_for_workflow, release_instances
from spotrun.control.capacity.standby import launch_standby
from spotrun.control.store import update_job
from spotrun.model.errors import InstanceLost, InstanceNotManaged, InstancesNotReleased
from spotrun.model.job.record import JobStatus, ManifestSource, new_job, transition
from spotrun.model.manifest.parse import parse_manifest_text
from spotrun.model.timing import WorkflowTiming, workflow_timing
from spotrun.shape import SHAPE, STATE_MACHINE_FILE
from tests.unit.fakes import FakeCommands, FakeCompute, InMemoryJobStore

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SUBNETS = ("subnet-a", "subnet-b")
MANIFEST = parse_manifest_text(
    "name: tiny\nresources: {gpu_names: [t4]}\ntraining: {command: [python, t.py]}\n"
)
TIMING = workflow_timing(MANIFEST, 1.0)


@pytest.fixture
def booting():
    store, compute, commands = InMemoryJobStore(), FakeCompute(), FakeCommands()
    source = ManifestSource(bucket="b", key="k", etag="e")
    store.create(new_job("tiny-1", "tiny", source, MANIFEST.model_dump(mode="json"), T0))
    attempt = acquire_instance(
        job_id="tiny-1",
        store=store,
        compute=compute,
        subnet_ids=SUBNETS,
        launch_template_name="spotrun-agent",
        timing=TIMING,
        now=T0,
    )
    return store, compute, commands, attempt.instance_id


def ready(store, compute, commands, at):
    return check_ready(
        job_id="tiny-1", store=store, compute=compute, commands=commands, timing=TIMING, now=at
    )


def test_running_is_not_ready_until_the_ssm_agent_is_online(booting):
    # Given an instance EC2 reports running, whose SSM agent has not registered yet
    store, compute, commands, instance_id = booting
    compute.states[instance_id] = "running"
    commands.unregistered.add(instance_id)
    # When readiness is checked
    report = ready(store, compute, commands, T0 + timedelta(seconds=60))
    # Then it is not ready (SendCommand would answer InvalidInstanceId), and the wait is timed from now
    assert (report.ready, report.state, report.agent_online) == (False, "running", False)
    assert store.get("tiny-1").current_attempt.running_at == T0 + timedelta(seconds=60)
    # When the agent registers
    commands.unregistered.clear()
    # Then it is ready
    assert ready(store, compute, commands, T0 + timedelta(seconds=90)).ready


def test_an_agent_that_never_registers_fails_with_advice_and_the_instance_is_terminated(booting):
    # Given a running instance whose SSM agent stays offline
    store, compute, commands, instance_id = booting
    compute.states[instance_id] = "running"
    commands.unregistered.add(instance_id)
    ready(store, compute, commands, T0 + timedelta(seconds=60))
    # When the registration timeout has passed since it was first seen running
    late = T0 + timedelta(seconds=60 + TIMING.ssm_registration_timeout_seconds + 1)
    with pytest.raises(InstanceNotManaged, match="AmazonSSMManagedInstanceCore") as caught:
        ready(store, compute, commands, late)
    # Then the error, under its ASL name, says why; the instance is terminated
    assert type(caught.value).__name__ == "Instance.NotManaged"
    assert compute.states[instance_id] == "terminated"


class SteppedClock:
    """A clock that only moves when the code under test sleeps; something may happen after the n-th pause."""

    def __init__(self, start, on_sleep=None):
        self.now, self.pauses, self.on_sleep = start, [], on_sleep

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.pauses.append(seconds)
        self.now += timedelta(seconds=seconds)
        if self.on_sleep is not None:
            self.on_sleep(len(self.pauses))


def held(store, compute, commands, clock, timing=TIMING):
    return await_ready(
        job_id="tiny-1",
        store=store,
        compute=compute,
        commands=commands,
        timing=timing,
        clock=clock,
        sleep=clock.sleep,
    )


def test_the_check_answers_within_a_recheck_of_the_agent_registering(booting):
    # Given a running instance whose SSM agent registers after the check's third pause
    store, compute, commands, instance_id = booting
    compute.states[instance_id] = "running"
    commands.unregistered.add(instance_id)
    clock = SteppedClock(T0, on_sleep=lambda n: n == 3 and commands.unregistered.clear())
    # When readiness is checked
    report = held(store, compute, commands, clock)
    # Then the check looked again every recheck interval and answered ready at the next look, not after a poll
    assert report.ready
    assert clock.pauses == [TIMING.ready_recheck_seconds] * 3


def test_the_check_holds_no_longer_than_its_hold(booting):
    # Given a running instance whose SSM agent does not register
    store, compute, commands, instance_id = booting
    compute.states[instance_id] = "running"
    commands.unregistered.add(instance_id)
    clock = SteppedClock(T0)
    # When readiness is checked
    report = held(store, compute, commands, clock)
    # Then it answers "not yet" once the hold is spent, never past it: the workflow's Wait takes over
    assert not report.ready
    assert sum(clock.pauses) <= TIMING.ready_hold_seconds
    assert sum(clock.pauses) > TIMING.ready_hold_seconds - TIMING.ready_recheck_seconds
    # And without a hold (an execution started before the field existed) it looks once
    once = SteppedClock(T0)
    legacy = WorkflowTiming.model_validate(TIMING.model_dump(exclude={"ready_hold_seconds"}))
    assert not held(store, compute, commands, once, legacy).ready
    assert once.pauses == []


def test_the_workflow_checks_readiness_as_soon_as_it_has_an_instance():
    # Given the workflow
    states = json.loads(STATE_MACHINE_FILE.read_text())["States"]
    # Then the first check follows the acquisition at once: an adopted standby, which booted while the old
    # instance uploaded its checkpoint, is staged without waiting a poll (15 s on AWS)
    assert states["AcquireCapacity"]["Next"] == "CheckInstanceReady"
    # And the poll's Wait comes only after a "not yet", before the next check
    assert states["InstanceReady?"]["Default"] == "WaitForBoot"
    assert states["WaitForBoot"]["Next"] == "CheckInstanceReady"


def test_the_hold_fits_in_the_readiness_function_timeout():
    # Given the deployed timing (AWS's clock) and the function that runs the check
    (spec,) = [f for f in SHAPE.functions if f.name == "instance_ready"]
    # Then a hold, plus a last look, ends well before Lambda would cut the function off
    assert TIMING.ready_hold_seconds + 10 <= spec.timeout_seconds


def test_not_found_just_after_launch_is_not_yet_visible_not_lost(booting):
    # Given an instance EC2 does not know yet (eventual consistency after CreateFleet)
    store, compute, commands, instance_id = booting
    compute.invisible.add(instance_id)
    # When readiness is checked within the consistency window
    report = ready(store, compute, commands, T0 + timedelta(seconds=5))
    # Then it is simply not ready yet
    assert (report.ready, report.state) == (False, None)
    # When EC2 still does not know it well after the window
    # Then it is lost
    with pytest.raises(InstanceLost, match="unknown to EC2"):
        ready(store, compute, commands, T0 + EC2_CONSISTENCY_GRACE + timedelta(seconds=1))


def test_a_release_answered_not_found_keeps_the_instance_and_retries(booting):
    # Given an instance just launched, that EC2 answers NotFound for (it runs nonetheless)
    store, compute, _commands, instance_id = booting
    compute.invisible.add(instance_id)
    # When the workflow releases the job's capacity
    with pytest.raises(InstancesNotReleased, match=instance_id) as caught:
        release_for_workflow(job_id="tiny-1", reason="failed", store=store, compute=compute, now=T0)
    # Then release does not report done: the instance stays on the job's list to release
    assert type(caught.value).__name__ == "Instances.ReleasePending"
    assert store.get("tiny-1").unreleased == [instance_id]
    assert compute.states[instance_id] == "pending"
    # When EC2 has caught up and the workflow retries
    compute.invisible.clear()
    terminated = release_for_workflow(
        job_id="tiny-1", reason="failed", store=store, compute=compute, now=T0 + timedelta(seconds=2)
    )
    # Then the instance is terminated and nothing is left unreleased
    assert terminated == [instance_id]
    assert compute.states[instance_id] == "terminated"
    assert store.get("tiny-1").unreleased == []


def test_an_instance_unknown_long_after_its_launch_is_gone(booting):
    # Given an instance EC2 no longer knows, launched long ago (terminated and expired from its records)
    store, compute, _commands, instance_id = booting
    compute.invisible.add(instance_id)
    # When capacity is released
    released = release_instances(
        job_id="tiny-1", reason="failed", store=store, compute=compute, now=T0 + timedelta(hours=3)
    )
    # Then release is done: nothing EC2 could still run is left
    assert released == []
    assert store.get("tiny-1").unreleased == []


def _training(store):
    for status in (JobStatus.STAGING, JobStatus.TRAINING):
        update_job(store, "tiny-1", lambda current, status=status: transition(current, status, T0))


def test_a_standby_not_visible_yet_is_adopted_not_forgotten(booting):
    # Given a training job whose standby, launched on a warning, EC2 does not show yet
    store, compute, _commands, instance_id = booting
    compute.states[instance_id] = "running"
    _training(store)
    standby = launch_standby(
        job_id="tiny-1",
        store=store,
        compute=compute,
        subnet_ids=SUBNETS,
        launch_template_name="spotrun-agent",
        now=T0,
    )
    assert standby is not None
    compute.invisible.add(standby.instance_id)
    update_job(
        store,
        "tiny-1",
        lambda current: transition(
            current.model_copy(
                update={
                    "attempts": [
                        current.attempts[0].model_copy(
                            update={"ended_at": T0, "end_reason": "spot-interrupted"}
                        )
                    ]
                }
            ),
            JobStatus.INTERRUPTED,
            T0,
        ),
    )
    # When the next attempt acquires capacity
    attempt = acquire_instance(
        job_id="tiny-1",
        store=store,
        compute=compute,
        subnet_ids=SUBNETS,
        launch_template_name="spotrun-agent",
        timing=TIMING,
        now=T0 + timedelta(seconds=3),
    )
    # Then it adopts the standby rather than dropping it (and launching another)
    assert attempt.instance_id == standby.instance_id
    assert len(compute.fleet_requests) == 2


def test_a_standby_that_lost_the_race_stays_on_the_job_until_released(booting):
    # Given a training job that has a standby already
    store, compute, _commands, instance_id = booting
    compute.states[instance_id] = "running"
    _training(store)
    first = launch_standby(
        job_id="tiny-1", store=store, compute=compute, subnet_ids=SUBNETS, launch_template_name="lt", now=T0
    )
    assert first is not None
    # When a second warning's launch loses the race (it read the job before the first standby was stored),
    # and EC2 answers NotFound for its termination
    read, reads = store.get, []

    def stale_first_read(job_id):
        reads.append(job_id)
        job = read(job_id)
        return job.model_copy(update={"standby": None}) if len(reads) == 1 else job

    store.get = stale_first_read
    real_terminate = compute.terminate

    def not_found_for_new(ids):
        # EC2 does not know the instance launched moments ago: NotFound, and it keeps running
        return real_terminate([i for i in ids if i in (instance_id, first.instance_id)])

    compute.terminate = not_found_for_new
    loser = launch_standby(
        job_id="tiny-1", store=store, compute=compute, subnet_ids=SUBNETS, launch_template_name="lt", now=T0
    )
    store.get = read
    # Then it reports no standby, but the instance it launched stays among the job's instances
    assert loser is None
    job = store.get("tiny-1")
    launched_third = next(i for i in compute.states if i not in (instance_id, first.instance_id))
    assert [attempt.instance_id for attempt in job.unused_instances] == [launched_third]
    # And the job's release terminates it once EC2 knows it
    compute.terminate = real_terminate
    release_for_workflow(job_id="tiny-1", reason="failed", store=store, compute=compute, now=T0)
    assert compute.states[launched_third] == "terminated"

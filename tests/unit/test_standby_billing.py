"""Unit tests of standby instances that were never used: each is billed when the job ends (control.interruptions)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from spotrun.control.capacity.release import release_instances
from spotrun.control.capacity.standby import launch_standby
from spotrun.control.finalize import finalize_job
from spotrun.control.store import update_job
from tests.unit.interruption_world import SETTINGS, T0, interrupt_and_relaunch, job_in_training, warn


@pytest.fixture
def world():
    return job_in_training()


def test_a_standby_never_used_is_billed_when_the_job_ends(world):
    # Given a warned job whose standby was launched at T0 + 5 min
    store, compute, attempt = world
    standby = warn(store, compute, attempt.instance_id).standby_instance_id
    # When the job fails and its instances are released at T0 + 8 min, then its outcome is recorded
    release_instances(
        job_id="tiny-0123456789ab",
        reason="failed",
        store=store,
        compute=compute,
        now=T0 + timedelta(minutes=8),
    )
    job = finalize_job(
        job_id="tiny-0123456789ab", outcome="FAILED", error=None, store=store, now=T0 + timedelta(minutes=9)
    )
    # Then the standby is kept as an unused instance that ran 3 minutes, and the cost counts both instances
    [unused] = job.unused_instances
    assert (unused.instance_id, unused.end_reason) == (standby, "unused-standby")
    assert unused.ended_at - unused.started_at == timedelta(minutes=3)
    assert job.standby is None
    assert job.cost.spot_instances == 2
    assert job.cost.usd == round(0.2 * (8 * 60) / 3600 + 0.2 * (3 * 60) / 3600, 4)


def test_a_standby_that_lost_a_race_is_billed(world):
    # Given a warned job where another standby got recorded while this one was being launched
    store, compute, _attempt = world
    update_job(store, "tiny-0123456789ab", lambda job: job.model_copy(update={"standby": None}))
    launch = compute.create_fleet
    rival = store.get("tiny-0123456789ab").current_attempt.model_copy(
        update={"instance_id": "i-rival", "number": 2}
    )

    def create_fleet_while_another_wins(request):
        answer = launch(request)
        update_job(store, "tiny-0123456789ab", lambda job: job.model_copy(update={"standby": rival}))
        return answer

    compute.create_fleet = create_fleet_while_another_wins
    # When the standby is launched and finds it lost the race
    kept = launch_standby(
        job_id="tiny-0123456789ab",
        store=store,
        compute=compute,
        subnet_ids=SETTINGS.subnet_ids,
        launch_template_name="spotrun-agent",
        now=T0 + timedelta(minutes=5),
    )
    # Then it is terminated, and still billed: it ran
    assert kept is None
    [unused] = store.get("tiny-0123456789ab").unused_instances
    assert compute.states[unused.instance_id] == "terminated"
    assert unused.end_reason == "unused-standby"


def test_a_standby_reclaimed_before_the_next_attempt_is_billed(world):
    # Given a warned job whose standby was reclaimed before the interruption was recorded
    store, compute, attempt = world
    standby = warn(store, compute, attempt.instance_id).standby_instance_id
    compute.states[standby] = "terminated"
    interrupt_and_relaunch(store, compute, 1)
    # Then the next attempt runs on a new instance, and the reclaimed standby stays in the bill
    job = store.get("tiny-0123456789ab")
    assert job.current_attempt.instance_id != standby
    assert [unused.instance_id for unused in job.unused_instances] == [standby]
    assert standby in [instance.instance_id for instance in job.billed_instances()]

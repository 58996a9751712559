"""The warning's standby and the workflow's next acquisition may race: one replacement is launched, not two.

The warning handler gives the agent its notice and then launches the standby; the agent may checkpoint, the
step end and the workflow acquire before that launch returns. The notice reserves the standby
(``standby_launching_at``), and an acquisition that finds the reservation waits for it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from spotrun.control.capacity.interruptions import record_interruption
from spotrun.model.errors import CapacityUnavailable
from spotrun.model.job.standby import STANDBY_LAUNCH_SECONDS
from spotrun.shape import SHAPE
from tests.unit.fakes import FakeObjects
from tests.unit.interruption_world import BUCKET, T0, acquire, job_in_training, warn

JOB = "tiny-0123456789ab"
WARNED = T0 + timedelta(minutes=5)


def ended(store, compute) -> None:
    """The agent's answer to the notice, recorded: the attempt is over and the workflow acquires next."""
    record_interruption(
        job_id=JOB,
        error={"Error": "Spot.Interrupted", "Cause": "{}"},
        store=store,
        compute=compute,
        objects=FakeObjects(),
        jobs_bucket=BUCKET,
        now=WARNED,
    )


def test_an_acquisition_during_the_standbys_launch_waits_for_it_and_then_adopts_it() -> None:
    # Given a job training, whose warning's standby launch is slow: while EC2 answers it, the attempt ends and
    # the workflow acquires
    store, compute, attempt = job_in_training()
    launch = compute.create_fleet
    during: list[Exception] = []

    def slow_launch(request):
        ended(store, compute)
        with pytest.raises(CapacityUnavailable) as waited:
            acquire(store, compute, WARNED)
        during.append(waited.value)
        return launch(request)

    compute.create_fleet = slow_launch
    # When the warning is handled, and the workflow acquires again after its wait
    outcome = warn(store, compute, attempt.instance_id)
    compute.create_fleet = launch
    second = acquire(store, compute, WARNED + timedelta(seconds=1))
    # Then the acquisition inside the launch waited (and launched nothing); the next one adopted the standby:
    # two instances for the job in all, the first attempt's and its replacement
    assert "still being launched" in str(during[0])
    assert second.instance_id == outcome.standby_instance_id
    assert len(compute.fleet_requests) == 2
    job = store.get(JOB)
    assert job.standby is None
    assert job.standby_launching_at is None
    assert job.unused_instances == []


def test_a_standby_launch_that_finds_no_capacity_lets_the_acquisition_launch() -> None:
    # Given a warning whose standby finds no capacity
    store, compute, attempt = job_in_training()
    compute.unavailable = True
    warn(store, compute, attempt.instance_id)
    compute.unavailable = False
    ended(store, compute)
    # When the workflow acquires, Then the reservation is gone and it launches the replacement itself
    assert store.get(JOB).standby_launching_at is None
    assert acquire(store, compute, WARNED).instance_id != attempt.instance_id


def test_a_reservation_left_by_a_launch_that_died_stops_waiting_after_the_functions_timeout() -> None:
    # Given a reservation whose launch never came back (its invocation died before clearing it), and the
    # attempt ended
    store, compute, attempt = job_in_training()
    store.save(store.get(JOB).model_copy(update={"standby_launching_at": WARNED}))
    ended(store, compute)
    # When the workflow acquires within the ec2_events function's timeout, and after it
    with pytest.raises(CapacityUnavailable):
        acquire(store, compute, WARNED + timedelta(seconds=STANDBY_LAUNCH_SECONDS - 1))
    replacement = acquire(store, compute, WARNED + timedelta(seconds=STANDBY_LAUNCH_SECONDS))
    # Then it waits only as long as a launch can be in flight, then launches
    assert replacement.instance_id != attempt.instance_id
    assert SHAPE.function("ec2_events").timeout_seconds == STANDBY_LAUNCH_SECONDS

"""How an interrupted attempt's end is recorded: warned or silent, a deadline move, and warnings that come late."""

from collections.abc import Callable
from datetime import timedelta

import pytest

from spotrun.control.capacity.interruptions import record_interruption
from spotrun.control.store import update_job
from spotrun.model.agent_protocol.command import FailureCause
from spotrun.model.layout import progress_key
from tests.unit.fakes import FakeCommands, FakeObjects, InMemoryJobStore
from tests.unit.interruption_world import BUCKET, T0, job_in_training, warn


@pytest.fixture
def world():
    return job_in_training()


def after_the_next_read(store: InMemoryJobStore, action: Callable[[], object]) -> None:
    """Run ``action`` right after the store's next read, once: another handler acting between a read and its write."""
    read = store.get

    def read_then_act(job_id):
        job = read(job_id)
        store.get = read
        action()
        return job

    store.get = read_then_act


LOST = {
    "Error": "Instance.Lost",
    "Cause": FailureCause(message="instance is shutting-down").model_dump_json(),
}


def close_lost(store, compute, objects=None, error=LOST):
    return record_interruption(
        job_id="tiny-0123456789ab",
        error=error,
        store=store,
        compute=compute,
        objects=objects or FakeObjects(),
        jobs_bucket=BUCKET,
        now=T0 + timedelta(minutes=7),
    )


def test_an_instance_lost_after_its_warning_ends_interrupted_and_a_silent_one_instance_lost():
    # Given two training jobs, one of them warned
    warned_store, warned_compute, warned_attempt = job_in_training()
    warn(warned_store, warned_compute, warned_attempt.instance_id)
    silent_store, silent_compute, _ = job_in_training()
    # When each loses its instance before its agent reported (Instance.Lost from the state change)
    warned = close_lost(warned_store, warned_compute)
    silent = close_lost(silent_store, silent_compute)
    # Then the warned one was interrupted, the other lost silently; both count as one interruption
    assert (warned.reason, silent.reason) == ("interrupted", "instance-lost")
    assert warned_store.get("tiny-0123456789ab").attempts[0].end_reason == "interrupted"
    assert [s.get("tiny-0123456789ab").interruptions for s in (warned_store, silent_store)] == [1, 1]


def test_a_warning_recorded_while_the_loss_is_being_recorded_still_makes_it_interrupted(world):
    # Given a lost instance whose warning is handled just after the workflow first read the job
    store, compute, attempt = world
    after_the_next_read(store, lambda: warn(store, compute, attempt.instance_id))
    # When the loss is recorded
    closed = close_lost(store, compute)
    # Then the attempt as written is interrupted: the reason is taken from the record it closes
    assert closed.reason == "interrupted"
    assert store.get("tiny-0123456789ab").attempts[0].end_reason == "interrupted"


def test_the_deadline_policys_notice_is_a_move_unless_the_instance_was_lost_meanwhile():
    # Given two jobs given the deadline policy's notice (no warning from EC2)
    moved, lost = job_in_training(), job_in_training()
    for store, _, _ in (moved, lost):
        update_job(
            store,
            "tiny-0123456789ab",
            lambda job: job.with_current_attempt(
                job.current_attempt.model_copy(update={"notice_at": T0, "deadline_move": True})
            ),
        )
    # When one agent answers the notice and the other's instance is lost first
    answered = close_lost(moved[0], moved[1], error={"Error": "Spot.Interrupted", "Cause": "{}"})
    gone = close_lost(lost[0], lost[1])
    # Then the first is the move, the second a loss without a warning of its own
    assert (answered.reason, gone.reason) == ("deadline-move", "instance-lost")


def test_a_warning_after_the_loss_was_recorded_amends_the_record_and_acts_on_nothing(world):
    # Given an instance whose loss was recorded first (its state change handled before its warning)
    store, compute, attempt = world
    objects = FakeObjects()
    objects.put_json(BUCKET, progress_key("tiny-0123456789ab", 1), {"step": 40})
    close_lost(store, compute, objects)
    commands, launched = FakeCommands(), len(compute.fleet_requests)
    # When the warning arrives
    outcome = warn(store, compute, attempt.instance_id, commands=commands)
    # Then the attempt was interrupted, its notice recorded (it lost all 40 steps: no checkpoint committed);
    # nothing is sent to the gone agent and no replacement is launched
    assert outcome.action.startswith("late warning recorded")
    [first] = store.get("tiny-0123456789ab").attempts
    assert (first.end_reason, first.notice_at) == ("interrupted", T0 + timedelta(minutes=5))
    assert (first.steps_lost, first.notice_checkpoint_committed) == (40, False)
    assert commands.sent == []
    assert len(compute.fleet_requests) == launched


def test_a_warning_racing_the_close_of_its_attempt_amends_the_closed_record(world):
    # Given a warning whose first read saw the attempt open, closed as lost right after that read
    store, compute, attempt = world
    after_the_next_read(store, lambda: close_lost(store, compute))
    commands = FakeCommands()
    # When the warning is handled
    outcome = warn(store, compute, attempt.instance_id, commands=commands)
    # Then the closed attempt is amended to interrupted, and nothing is sent
    assert outcome.action.startswith("late warning recorded")
    assert store.get("tiny-0123456789ab").attempts[0].end_reason == "interrupted"
    assert commands.sent == []


def test_a_late_warning_leaves_an_attempt_that_ended_otherwise_as_it_was(world):
    # Given an attempt released after training completed
    store, compute, attempt = world
    update_job(
        store,
        "tiny-0123456789ab",
        lambda job: job.with_current_attempt(
            job.current_attempt.model_copy(update={"ended_at": T0, "end_reason": "completed"})
        ),
    )
    # When a warning for its instance arrives
    outcome = warn(store, compute, attempt.instance_id)
    # Then nothing changes
    assert outcome.action.startswith("ignored")
    [first] = store.get("tiny-0123456789ab").attempts
    assert (first.end_reason, first.notice_at) == ("completed", None)

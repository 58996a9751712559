from datetime import UTC, datetime, timedelta

import pytest

from spotrun.model.errors import InvalidTransition
from spotrun.model.job import (
    ALLOWED_TRANSITIONS,
    TERMINAL_STATUSES,
    JobStatus,
    ManifestSource,
    can_transition,
    job_id_for,
    new_job,
    timeline_durations,
    transition,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HAPPY_PATH = [
    JobStatus.ACQUIRING,
    JobStatus.BOOTING,
    JobStatus.STAGING,
    JobStatus.TRAINING,
    JobStatus.ARCHIVING,
    JobStatus.SUCCEEDED,
]


def a_job():
    return new_job("demo-abc", "demo", ManifestSource(bucket="b", key="manifests/a.yaml", etag="e"), {}, T0)


def test_happy_path_is_allowed_and_recorded_on_the_timeline():
    # Given a submitted job
    job = a_job()
    # When it goes through the happy path, one second per state
    for offset, status in enumerate(HAPPY_PATH, start=1):
        job = transition(job, status, T0 + timedelta(seconds=offset))
    # Then every state is on the timeline in order
    assert [change.status for change in job.timeline] == [JobStatus.SUBMITTED, *HAPPY_PATH]
    assert job.status is JobStatus.SUCCEEDED
    assert job.updated_at == T0 + timedelta(seconds=len(HAPPY_PATH))


def test_relaunch_loop_is_allowed():
    # Given a training job
    job = a_job()
    for status in HAPPY_PATH[:4]:
        job = transition(job, status, T0)
    # When its instance is reclaimed and a new one is acquired
    job = transition(job, JobStatus.INTERRUPTED, T0)
    job = transition(job, JobStatus.ACQUIRING, T0)
    # Then it is acquiring again
    assert job.status is JobStatus.ACQUIRING


@pytest.mark.parametrize(
    ("current", "new"),
    [
        (JobStatus.SUBMITTED, JobStatus.TRAINING),
        (JobStatus.ACQUIRING, JobStatus.SUCCEEDED),
        (JobStatus.STAGING, JobStatus.ARCHIVING),
        (JobStatus.SUCCEEDED, JobStatus.FAILED),
        (JobStatus.FAILED, JobStatus.ACQUIRING),
        (JobStatus.REJECTED, JobStatus.ACQUIRING),
        (JobStatus.CANCELLED, JobStatus.TRAINING),
    ],
)
def test_forbidden_transitions_raise_and_name_both_states(current, new):
    # Given a job in `current`
    job = a_job().model_copy(update={"status": current})
    # When / Then moving to `new` is refused with a message naming both states
    with pytest.raises(InvalidTransition, match=f"{current.value} -> {new.value}"):
        transition(job, new, T0)


def test_repeating_the_current_status_is_a_no_op():
    # Given a job in STAGING
    job = transition(
        transition(transition(a_job(), JobStatus.ACQUIRING, T0), JobStatus.BOOTING, T0), JobStatus.STAGING, T0
    )
    # When a redelivered step asks for STAGING again
    again = transition(job, JobStatus.STAGING, T0 + timedelta(seconds=5))
    # Then nothing changes
    assert again == job


def test_terminal_statuses_allow_nothing_and_active_ones_can_fail_and_be_cancelled():
    for status, allowed in ALLOWED_TRANSITIONS.items():
        if status in TERMINAL_STATUSES:
            assert allowed == frozenset(), status
        else:
            assert can_transition(status, JobStatus.FAILED), status
            assert can_transition(status, JobStatus.CANCELLED), status


def test_job_id_is_stable_per_submission_and_differs_between_submissions():
    # Given two deliveries of the same object and one of a changed object
    first = ManifestSource(bucket="b", key="manifests/a.yaml", etag="111")
    again = ManifestSource(bucket="b", key="manifests/a.yaml", etag="111")
    changed = ManifestSource(bucket="b", key="manifests/a.yaml", etag="222")
    # When ids are derived
    # Then the same object gets the same id and a new version a new one
    assert job_id_for("My Job", first) == job_id_for("My Job", again)
    assert job_id_for("My Job", first) != job_id_for("My Job", changed)
    assert job_id_for("My Job", first).startswith("my-job-")
    assert len(job_id_for("x" * 200, first)) <= 80


def test_timeline_durations_measure_each_state_and_stop_at_terminal():
    # Given a job that spent 2 s acquiring and then failed
    job = transition(a_job(), JobStatus.ACQUIRING, T0 + timedelta(seconds=1))
    job = transition(job, JobStatus.FAILED, T0 + timedelta(seconds=3))
    # When durations are computed long after
    durations = timeline_durations(job, T0 + timedelta(hours=1))
    # Then each state has its own duration and the terminal one is zero
    assert durations == [(JobStatus.SUBMITTED, 1.0), (JobStatus.ACQUIRING, 2.0), (JobStatus.FAILED, 0.0)]

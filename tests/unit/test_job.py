from datetime import UTC, datetime, timedelta

import pytest

from spotrun.control.views.job_json import job_record
from spotrun.model.errors import InvalidTransition
from spotrun.model.job.ids import job_id_for
from spotrun.model.job.record import (
    ALLOWED_TRANSITIONS,
    TERMINAL_STATUSES,
    Job,
    JobStatus,
    ManifestSource,
    can_transition,
    new_job,
    timeline_durations,
    transition,
)
from spotrun.model.manifest.parse import parse_manifest_text
from spotrun.model.manifest.schema import JobManifest

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
    return new_job("demo-abc", "demo", ManifestSource(bucket="b", key="manifests/a.yaml", etag="e"), None, T0)


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


MANIFEST = parse_manifest_text(
    "name: tiny\nresources: {gpu_names: [t4]}\nbudget: {max_usd: 2.5}\ntraining: {command: [python, t.py]}\n"
)


def test_the_manifest_travels_typed_and_is_stored_as_its_json_form():
    # Given a job made from a validated manifest
    job = new_job("tiny-1", "tiny", ManifestSource(kind="api", key="k"), MANIFEST, T0)
    # When it is stored as JSON and read again
    stored = job.model_dump_json()
    reloaded = Job.model_validate_json(stored)
    # Then each step reads the manifest's fields, and the stored form and the record are the manifest's JSON
    assert isinstance(reloaded.manifest, JobManifest)
    assert reloaded.require_manifest().budget.max_usd == 2.5
    assert reloaded == job
    assert job_record(reloaded)["manifest"] == MANIFEST.model_dump(mode="json")


def test_a_job_stored_with_its_manifest_as_a_dict_reloads_typed():
    # Given a record as stored before the manifest was typed: the manifest's JSON form inside the document
    document = {
        "job_id": "tiny-1",
        "name": "tiny",
        "status": "TRAINING",
        "source": {"kind": "api", "key": "k"},
        "manifest": MANIFEST.model_dump(mode="json"),
        "created_at": T0.isoformat(),
        "updated_at": T0.isoformat(),
    }
    # When it is read
    job = Job.model_validate(document)
    # Then its manifest is the validated one
    assert job.manifest == MANIFEST


def test_a_rejected_job_has_no_manifest_to_run():
    # Given a job whose manifest was refused
    job = a_job()
    # When a step asks for its manifest, Then it is refused by name
    with pytest.raises(ValueError, match="demo-abc has no manifest"):
        job.require_manifest()

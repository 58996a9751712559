"""`name`: the job is recorded under it, and its id (and workflow execution) is derived from it."""

from __future__ import annotations

from datetime import UTC, datetime

from spotrun.control.submission import start_job
from spotrun.model.job.record import ManifestSource
from spotrun.model.manifest.parse import parse_manifest_document
from tests.unit.fakes import FakeWorkflows, InMemoryJobStore

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_the_job_is_named_and_identified_after_the_manifests_name():
    # Given a valid manifest named "churn-model"
    manifest = parse_manifest_document(
        {"name": "churn-model", "training": {"command": ["python", "train.py"]}}
    )
    store, workflows = InMemoryJobStore(), FakeWorkflows()

    # When it is submitted
    outcome = start_job(
        manifest,
        ManifestSource(bucket="jobs", key="manifests/churn.yaml", etag="e1"),
        store=store,
        workflows=workflows,
        state_machine_arn="arn:aws:states:us-east-1:123456789012:stateMachine:spotrun-job",
        time_scale=1.0,
        now=T0,
    )

    # Then its id starts with the name, the record carries the name, and the execution is named by the id
    assert outcome.job_id.startswith("churn-model-")
    job = store.get(outcome.job_id)
    assert job is not None
    assert job.name == "churn-model"
    assert list(workflows.started) == [outcome.job_id]

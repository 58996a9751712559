"""Property: whatever is dropped under manifests/, the S3 entry point ends with a started job or a rejection whose
every line names a problem, never another exception (bounded examples: a few seconds)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings

from spotrun.control.submission import submit_s3_manifest
from spotrun.model.job.record import JobStatus, ManifestSource
from spotrun.model.manifest.parse import MAX_ERRORS, ManifestError, parse_manifest_text
from spotrun.model.manifest.schema import JobManifest
from tests.unit.fakes import FakeObjects, FakeWorkflows, InMemoryJobStore
from tests.unit.manifest_strategies import manifest_inputs

T0 = datetime(2026, 12, 1, tzinfo=UTC)
BOUNDED = settings(
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _names_a_problem(line: str) -> bool:
    where, sep, what = line.partition(": ")
    return isinstance(line, str) and bool(sep) and bool(where) and bool(what.strip())


def _read(text: str | bytes) -> tuple[JobManifest | None, ManifestError | None]:
    try:
        return parse_manifest_text(text), None
    except ManifestError as exc:  # any other exception fails the test
        return None, exc


@BOUNDED
@given(manifest_inputs())
def test_every_input_is_a_manifest_or_a_manifest_error_naming_each_problem(text):
    manifest, refusal = _read(text)
    if refusal is not None:
        assert refusal.errors, "a refusal names at least one problem"
        assert len(refusal.errors) <= MAX_ERRORS + 1
        assert all(_names_a_problem(line) for line in refusal.errors), refusal.errors
    else:
        assert isinstance(manifest, JobManifest)
        json.dumps(manifest.model_dump(mode="json"), allow_nan=False)  # storable as the job record


@BOUNDED
@given(manifest_inputs())
def test_every_dropped_manifest_is_started_or_rejected_with_a_report(text):
    # Given anything dropped under manifests/
    body = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    store, objects, workflows = InMemoryJobStore(), FakeObjects(), FakeWorkflows()
    # When the S3 entry point handles it
    outcome = submit_s3_manifest(
        source=ManifestSource(kind="s3", bucket="jobs", key="manifests/m.yaml", etag="e"),
        body=body,
        size=len(body),
        store=store,
        objects=objects,
        workflows=workflows,
        state_machine_arn="arn:sm",
        time_scale=1.0,
        archive_buckets=("archive",),
        now=T0,
    )
    # Then it started a job, or rejected it with a report and a record naming each problem
    job = store.get(outcome.job_id or "")
    assert job is not None
    if outcome.outcome == "started":
        assert job.status is JobStatus.SUBMITTED
        assert list(workflows.started) == [job.job_id]
        return
    assert outcome.outcome == "rejected"
    report = json.loads(objects.objects[("jobs", "manifests/m.yaml.rejected.json")])
    assert report["errors"]
    assert all(_names_a_problem(line) for line in report["errors"])
    assert job.status is JobStatus.REJECTED
    assert job.error.details == report["errors"]
    assert len(job.model_dump_json()) < 40_000

"""Submission over fakes: what each entry point admits, refuses and records (schedules, archive buckets, size,
bounded rejections, Idempotency-Key reuse)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from spotrun.aws.settings import Settings
from spotrun.control.schedules.firing import create_schedule
from spotrun.control.submission import (
    SCHEDULE_REFUSED,
    admission_problems,
    submit_api_manifest,
    submit_s3_manifest,
)
from spotrun.model.errors import RequestRejected
from spotrun.model.job.record import JobStatus, ManifestSource
from spotrun.model.manifest.parse import MAX_ERRORS, MAX_MANIFEST_BYTES, parse_manifest_document
from tests.unit.fakes import FakeObjects, FakeWorkflows, InMemoryJobStore
from tests.unit.test_manifest_hostile import billion_laughs
from tests.unit.test_schedules import FakeSchedules

T0 = datetime(2026, 12, 1, tzinfo=UTC)
BUCKET = "jobs"
OWN_ARCHIVE = ("spotrun-archive",)
TINY = {"name": "tiny", "training": {"command": ["python", "train.py"]}}
SCHEDULED = {**TINY, "schedule": {"expression": "rate(1 day)"}}
ELSEWHERE = {**TINY, "archive": {"destination": "s3://team-models/tiny/"}}


def drop(body: bytes, *, key: str = "manifests/tiny.yaml", size: int | None = None, archive=OWN_ARCHIVE):
    store, objects, workflows = InMemoryJobStore(), FakeObjects(), FakeWorkflows()
    outcome = submit_s3_manifest(
        source=ManifestSource(kind="s3", bucket=BUCKET, key=key, etag="etag-1"),
        body=body,
        size=len(body) if size is None else size,
        store=store,
        objects=objects,
        workflows=workflows,
        state_machine_arn="arn:sm",
        time_scale=1.0,
        archive_buckets=archive,
        now=T0,
    )
    report = objects.objects.get((BUCKET, key + ".rejected.json"))
    job = store.get(outcome.job_id) if outcome.job_id else None
    return outcome, (json.loads(report) if report else None), job, workflows


def post(
    document: dict,
    *,
    key: str | None = None,
    store=None,
    workflows=None,
    archive=OWN_ARCHIVE,
    jobs_bucket=BUCKET,
    objects=None,
):
    return submit_api_manifest(
        parse_manifest_document(document),
        idempotency_key=key,
        store=store or InMemoryJobStore(),
        objects=objects or FakeObjects(),
        workflows=workflows or FakeWorkflows(),
        state_machine_arn="arn:sm",
        time_scale=1.0,
        archive_buckets=archive,
        now=T0,
        jobs_bucket=jobs_bucket,
    )


def test_a_dropped_manifest_with_a_schedule_is_rejected_pointing_at_the_schedules_api():
    # Given a manifest with a schedule dropped into manifests/
    outcome, report, job, workflows = drop(json.dumps(SCHEDULED).encode())
    # Then nothing starts, and the report and the record say where schedules are made
    assert outcome.outcome == "rejected"
    assert workflows.started == {}
    assert SCHEDULE_REFUSED in report["errors"]
    assert "POST /schedules" in SCHEDULE_REFUSED
    assert "spotrun schedule create" in SCHEDULE_REFUSED
    assert job.status is JobStatus.REJECTED
    assert SCHEDULE_REFUSED in job.error.details


def test_a_posted_manifest_with_a_schedule_is_refused_and_starts_nothing():
    workflows = FakeWorkflows()
    with pytest.raises(RequestRejected) as caught:
        post(SCHEDULED, workflows=workflows)
    assert caught.value.status == 422
    assert caught.value.errors == [SCHEDULE_REFUSED]
    assert workflows.started == {}


def test_the_same_schedule_is_still_created_through_the_schedules_api():
    # Given the schedule-bearing manifest refused above, When it goes to create_schedule, Then it is created
    schedules = FakeSchedules()
    view = create_schedule(
        parse_manifest_document(SCHEDULED),
        schedules=schedules,
        objects=FakeObjects(),
        bucket=BUCKET,
        archive_buckets=OWN_ARCHIVE,
        now=T0,
    )
    assert view.name == "tiny"


def test_an_archive_destination_outside_the_allowed_buckets_is_refused_naming_them():
    # Given a destination in a bucket the deployment was not given
    manifest = parse_manifest_document(ELSEWHERE)
    # When it is admitted with and without that bucket among the deployment's archive buckets
    refused = admission_problems(manifest, archive_buckets=("spotrun-archive", "other"))
    allowed = admission_problems(manifest, archive_buckets=("spotrun-archive", "team-models"))
    # Then the refusal names the bucket, the allowed ones and the option; the granted bucket passes
    [line] = refused
    assert line.startswith("archive.destination:")
    assert "'team-models'" in line
    assert "allowed: other, spotrun-archive" in line
    assert "archive_buckets" in line
    assert allowed == []


def test_both_entry_points_refuse_a_destination_outside_the_archive_buckets():
    outcome, report, _, workflows = drop(json.dumps(ELSEWHERE).encode())
    assert outcome.outcome == "rejected"
    assert workflows.started == {}
    assert report["errors"][0].startswith("archive.destination:")
    with pytest.raises(RequestRejected):
        post(ELSEWHERE)
    assert post(ELSEWHERE, archive=(*OWN_ARCHIVE, "team-models")).outcome == "started"


INTO_JOBS = {**TINY, "training": {**TINY["training"], "code": f"s3://{BUCKET}/jobs/other-000000000001/"}}


def test_both_entry_points_refuse_inputs_or_code_over_the_jobs_prefix():
    # Given a manifest whose code is another job's prefix in the jobs bucket
    # When it is dropped, Then it is rejected naming the field, and nothing starts
    outcome, report, _, workflows = drop(json.dumps(INTO_JOBS).encode())
    assert outcome.outcome == "rejected"
    assert workflows.started == {}
    assert report["errors"][0].startswith("data.inputs / training.code:")
    assert "overlaps the jobs bucket's jobs/" in report["errors"][0]
    # When it is posted, Then it is refused; the same prefix in another bucket is admitted
    with pytest.raises(RequestRejected):
        post(INTO_JOBS)
    code = FakeObjects()  # the code exists there: admission lists it (spotrun.control.staged_sources)
    code.objects[(BUCKET, "jobs/other-000000000001/train.py")] = b"print()"
    assert post(INTO_JOBS, jobs_bucket="another-bucket", objects=code).outcome == "started"
    # and a schedule of it is refused, nothing stored
    objects = FakeObjects()
    with pytest.raises(RequestRejected) as refused:
        create_schedule(
            parse_manifest_document({**INTO_JOBS, "schedule": {"expression": "rate(1 day)"}}),
            schedules=FakeSchedules(),
            objects=objects,
            bucket=BUCKET,
            archive_buckets=OWN_ARCHIVE,
            now=T0,
        )
    assert refused.value.errors[0].startswith("data.inputs / training.code:")
    assert objects.objects == {}


def test_the_archive_buckets_setting_is_read_from_the_environment():
    # Given the deployment's archive bucket and the deployer's extra ones in the environment
    settings = Settings.from_env(
        {"SPOTRUN_ARCHIVE_BUCKET": "own", "SPOTRUN_ARCHIVE_BUCKETS": "team-models,shared"}
    )
    # Then every one of them is allowed, the deployment's own first, and it survives a round trip
    assert settings.allowed_archive_buckets == ("own", "team-models", "shared")
    assert Settings.from_env(settings.to_env()) == settings
    assert Settings.from_env({"SPOTRUN_ARCHIVE_BUCKET": "own"}).allowed_archive_buckets == ("own",)


def test_a_dropped_manifest_past_the_size_limit_is_rejected_without_being_read():
    # Given an object whose event says it is larger than a manifest may be (its body is not read)
    outcome, report, job, _ = drop(b"", size=MAX_MANIFEST_BYTES + 1, key="manifests/huge.yaml")
    outcome_none, _, _, _ = drop(None, size=MAX_MANIFEST_BYTES + 1)  # type: ignore[arg-type]
    # Then it is rejected, saying why
    assert outcome.outcome == outcome_none.outcome == "rejected"
    assert f"{MAX_MANIFEST_BYTES + 1} bytes" in report["errors"][0]
    assert "at most 262144 bytes (256 KiB)" in report["errors"][0]
    assert job.status is JobStatus.REJECTED


def test_a_rejection_with_many_errors_is_stored_bounded_with_its_count():
    # Given a manifest with 3,000 problems
    inputs = [{"source": "s3://bkt/x/"} for _ in range(3000)]
    outcome, report, job, _ = drop(json.dumps({**TINY, "data": {"inputs": inputs}}).encode())
    # Then the record and the report keep MAX_ERRORS lines and a count, far below DynamoDB's 400 KB
    assert outcome.outcome == "rejected"
    assert job.error.message == "3000 problem(s) in the manifest"
    assert len(job.error.details) == len(report["errors"]) == MAX_ERRORS + 1
    assert report["errors"][-1] == f"... and {3000 - MAX_ERRORS} more problem(s)"
    assert len(job.model_dump_json()) < 40_000


def test_an_alias_bomb_dropped_in_s3_ends_as_a_small_rejection_record():
    outcome, report, job, _ = drop(billion_laughs().encode())
    assert outcome.outcome == "rejected"
    assert "expands through its aliases" in report["errors"][0]
    assert len(job.model_dump_json()) < 10_000


def test_an_idempotency_key_reused_with_another_manifest_after_its_record_expired_is_a_409():
    # Given a job submitted with a key (its idempotency record has since expired: only the job remains)
    store, workflows = InMemoryJobStore(), FakeWorkflows()
    first = post(TINY, key="k-1", store=store, workflows=workflows)
    # When the same key comes with another manifest, and again with the first one
    with pytest.raises(RequestRejected) as caught:
        post({**TINY, "tags": {"team": "vision"}}, key="k-1", store=store, workflows=workflows)
    again = post(TINY, key="k-1", store=store, workflows=workflows)
    # Then the other manifest is refused with 409 and starts nothing; the same one is a duplicate
    assert caught.value.status == 409
    assert "Idempotency-Key" in caught.value.message
    assert list(workflows.started) == [first.job_id]
    assert (again.outcome, again.job_id) == ("duplicate", first.job_id)
    assert store.get(first.job_id).source.manifest_sha256 is not None


def test_a_short_text_that_is_too_long_as_json_is_refused_before_anything_is_stored():
    # Given 210 KB of YAML: a flow list of 70,000 one-letter arguments (280 KB as JSON)
    text = "name: tiny\ntraining:\n  command: [python, " + ", ".join(["a"] * 70_000) + "]\n"
    # When it is dropped
    outcome, report, job, workflows = drop(text.encode())
    # Then it is rejected saying how large it is as JSON, and the record stays small
    assert outcome.outcome == "rejected"
    assert workflows.started == {}
    assert "once written out as JSON; at most 262144 (256 KiB)" in report["errors"][0]
    assert job.manifest is None


def test_the_session_policy_is_sized_with_an_id_as_long_as_the_jobs_own():
    # Given the same inputs under a short name and under the longest name, as many as the short name's policy
    # still fits within STS's limit (the job id appears in every one of the job's own resources)
    def named(name: str, inputs: int) -> dict:
        sources = [{"source": f"s3://data/part-{n:03d}.bin", "destination": f"p{n}"} for n in range(inputs)]
        return {**TINY, "name": name, "data": {"inputs": sources}}

    def problems(name: str, inputs: int) -> list[str]:
        manifest = parse_manifest_document(named(name, inputs))
        return admission_problems(manifest, archive_buckets=OWN_ARCHIVE, jobs_bucket=BUCKET)

    inputs = next(n for n in range(1, 200) if problems("ab", n + 1))

    # When both are admitted
    short, longest = problems("ab", inputs), problems("a" * 48, inputs)

    # Then the short name's job is admitted and the longest one's refused, naming the policy's size
    assert short == []
    [line] = longest
    assert line.startswith("data.inputs / training.code: job " + "a" * 48 + "-000000000000's S3 access takes")

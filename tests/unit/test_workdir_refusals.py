"""training.workdir is the CLI's: every server-side entry point refuses it, and it never goes with code."""

from __future__ import annotations

import json

import pytest

from spotrun.control.schedules.firing import create_schedule
from spotrun.model.errors import RequestRejected
from spotrun.model.job.record import JobStatus
from spotrun.model.manifest.parse import ManifestError, parse_manifest_document
from tests.unit.fakes import FakeObjects, FakeWorkflows
from tests.unit.test_schedules import FakeSchedules
from tests.unit.test_submission import BUCKET, OWN_ARCHIVE, T0, TINY, drop, post

WITH_WORKDIR = {**TINY, "training": {**TINY["training"], "workdir": "./src"}}


def assert_names_the_cli(line: str) -> None:
    assert line.startswith("training.workdir: './src' is a directory on the machine that wrote the manifest")
    assert "spotrun submit FILE" in line


def test_a_dropped_manifest_with_a_workdir_is_rejected_naming_the_cli():
    # Given a manifest still naming a local workdir, dropped into manifests/
    outcome, report, job, workflows = drop(json.dumps(WITH_WORKDIR).encode())
    # Then nothing starts, and the report and the record say that the CLI uploads it
    assert outcome.outcome == "rejected"
    assert workflows.started == {}
    (line,) = report["errors"]
    assert_names_the_cli(line)
    assert job.status is JobStatus.REJECTED


def test_a_posted_manifest_with_a_workdir_is_refused_and_starts_nothing():
    workflows = FakeWorkflows()
    with pytest.raises(RequestRejected) as caught:
        post(WITH_WORKDIR, workflows=workflows)
    assert caught.value.status == 422
    (line,) = caught.value.errors
    assert_names_the_cli(line)
    assert workflows.started == {}


def test_a_schedule_with_a_workdir_is_refused_and_nothing_is_created():
    schedules = FakeSchedules()
    with pytest.raises(RequestRejected) as caught:
        create_schedule(
            parse_manifest_document({**WITH_WORKDIR, "schedule": {"expression": "rate(1 day)"}}),
            schedules=schedules,
            objects=FakeObjects(),
            bucket=BUCKET,
            archive_buckets=OWN_ARCHIVE,
            now=T0,
        )
    assert_names_the_cli(caught.value.errors[0])
    assert schedules.list() == []


def test_workdir_and_code_together_are_refused_by_the_manifest_itself():
    document = {**TINY, "training": {**WITH_WORKDIR["training"], "code": "s3://code-bucket/code/"}}
    with pytest.raises(ManifestError) as refused:
        parse_manifest_document(document)
    assert refused.value.errors == [
        "training: give either workdir (a local directory `spotrun submit` uploads) or code (in S3), not both"
    ]

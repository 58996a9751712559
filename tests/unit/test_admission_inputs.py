"""What "exists" means for a data input or the code (spotrun.control.staged_sources), over a fake S3."""

from __future__ import annotations

from typing import Any

from spotrun.control.ports import ObjectsUnreadable
from spotrun.control.staged_sources import missing_sources
from spotrun.model.agent_protocol.session_policy import staged_sources
from spotrun.model.manifest.parse import parse_manifest_document
from tests.unit.fakes import FakeObjects

JOBS = "jobs"


def manifest(*inputs: str, code: str | None = None) -> Any:
    training: dict[str, Any] = {"command": ["python", "train.py"]}
    if code is not None:
        training["code"] = code
    return parse_manifest_document(
        {
            "name": "inputs",
            "data": {"inputs": [{"source": uri, "destination": f"d{i}"} for i, uri in enumerate(inputs)]},
            "training": training,
        }
    )


def s3(*keys: str) -> FakeObjects:
    objects = FakeObjects()
    for uri in keys:
        bucket, key = uri.removeprefix("s3://").split("/", 1)
        objects.objects[(bucket, key)] = b"x"
    return objects


def test_a_prefix_must_hold_an_object_and_an_object_must_be_itself():
    # Given a prefix with data, an empty prefix, an existing object, and an object of which only a longer key exists
    objects = s3("s3://data/full/a.csv", "s3://data/file.csv", "s3://data/other.csv.bak")
    found = manifest("s3://data/full/", "s3://data/empty/", "s3://data/file.csv", "s3://data/other.csv")
    # When admission checks them
    problems = missing_sources(found, objects, jobs_bucket=JOBS)
    # Then exactly the empty prefix and the missing object are named, by field
    assert [line.split(":")[0] for line in problems] == ["data.inputs[1].source", "data.inputs[3].source"]
    assert "no object under s3://data/empty/" in problems[0]
    assert "no object s3://data/other.csv;" in problems[1]


def test_an_object_name_that_is_a_prefix_says_to_end_it_with_a_slash():
    # Given an input written without its trailing slash, whose objects lie under it
    problems = missing_sources(manifest("s3://data/set"), s3("s3://data/set/a.csv"), jobs_bucket=JOBS)
    # Then the problem points at the prefix it likely meant
    assert "(a prefix? end it with /: s3://data/set/)" in problems[0]


def test_code_is_an_archive_object_or_a_prefix():
    # Given a code archive that exists and a code directory written without a slash that holds a file
    archive = manifest(code="s3://jobs/code/" + "a" * 64 + ".tar.gz")
    directory = manifest(code="s3://jobs/src/app")
    objects = s3("s3://jobs/code/" + "a" * 64 + ".tar.gz", "s3://jobs/src/app/train.py")
    # Then both exist (the directory is staged, and checked, as the prefix src/app/)
    assert missing_sources(archive, objects, jobs_bucket=JOBS) == []
    assert missing_sources(directory, objects, jobs_bucket=JOBS) == []
    assert staged_sources(directory)[0].key == "src/app/"
    # And a directory that is only a longer name's beginning (src/application/) does not count
    assert missing_sources(directory, s3("s3://jobs/src/application/x.py"), jobs_bucket=JOBS)


def test_sources_under_jobs_are_not_listed():
    # Given an input under the jobs bucket's jobs/ (refused by admission as no job may read it)
    listed: list[tuple[str, str]] = []
    objects = s3()
    objects.first_key = lambda bucket, prefix: listed.append((bucket, prefix))  # type: ignore[method-assign]
    # When the sources are checked
    missing_sources(manifest("s3://jobs/jobs/other-000000000001/"), objects, jobs_bucket=JOBS)
    # Then nothing of another job was listed
    assert listed == []


def test_a_bucket_that_cannot_be_listed_is_a_problem_naming_why():
    # Given S3 refusing the listing
    objects = s3()

    def refuse(bucket: str, prefix: str) -> str | None:
        raise ObjectsUnreadable(f"the bucket {bucket!r} does not exist")

    objects.first_key = refuse  # type: ignore[method-assign]
    # Then the input is a problem that says so
    [problem] = missing_sources(manifest("s3://gone/x/"), objects, jobs_bucket=JOBS)
    assert (
        problem == "data.inputs[0].source: s3://gone/x/ cannot be checked: the bucket 'gone' does not exist"
    )

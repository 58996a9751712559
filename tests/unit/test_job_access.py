"""The session policy of a job's S3 credentials: its own objects, its manifest's inputs and code, nothing else."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spotrun.local.iam.policy.evaluate import allowed, like
from spotrun.model.agent_protocol.session_policy import (
    MAX_SESSION_POLICY_CHARS,
    JobAccessRefused,
    job_session_policy,
    literal,
    serialize,
)
from spotrun.model.layout import agent_command_key, commit_marker_key
from spotrun.model.manifest.schema import JobManifest

JOBS = "spotrun-jobs"
JOB = "tiny-0123456789ab"
OTHER = "tiny-ba9876543210"
OBJECTS = f"arn:aws:s3:::{JOBS}"


TRAIN = "s3://data-bucket/sets/train/"
LABELS = "s3://data-bucket/sets/labels.csv"


def manifest(*sources: str, **training: Any) -> JobManifest:
    inputs = [
        {"source": source, "destination": f"in-{n}"} for n, source in enumerate(sources or (TRAIN, LABELS))
    ]
    return JobManifest.model_validate(
        {
            "name": "tiny",
            "resources": {"gpu_names": ["t4"], "gpus_per_node": 1},
            "data": {"inputs": inputs},
            "training": {"command": ["python", "train.py"], "code": f"s3://{JOBS}/examples/code", **training},
        }
    )


def statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return policy["Statement"]


def test_the_policy_names_exactly_the_jobs_reads_writes_prunes_and_listings():
    # Given a manifest with a prefix input, an object input and code in the jobs bucket
    # When the policy of attempt 2 is built
    policy = job_session_policy(JOB, 2, manifest(), jobs_bucket=JOBS)

    # Then it holds exactly these statements
    assert policy == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "Read",
                "Effect": "Allow",
                "Action": ["s3:GetObject"],
                "Resource": [
                    f"{OBJECTS}/jobs/{JOB}/*",
                    "arn:aws:s3:::data-bucket/sets/train/*",
                    "arn:aws:s3:::data-bucket/sets/labels.csv",
                    f"{OBJECTS}/examples/code/*",
                ],
            },
            {
                "Sid": "Write",
                "Effect": "Allow",
                "Action": ["s3:PutObject", "s3:AbortMultipartUpload"],
                "Resource": [
                    f"{OBJECTS}/jobs/{JOB}/checkpoints/*",
                    f"{OBJECTS}/jobs/{JOB}/output/*",
                    f"{OBJECTS}/jobs/{JOB}/logs/attempt-002.log",
                    f"{OBJECTS}/jobs/{JOB}/progress/attempt-002.json",
                    f"{OBJECTS}/jobs/{JOB}/agent/attempt-002-outputs.json",
                    f"{OBJECTS}/jobs/{JOB}/telemetry/attempt-002/*",
                ],
            },
            {
                "Sid": "Prune",
                "Effect": "Allow",
                "Action": ["s3:DeleteObject"],
                "Resource": [f"{OBJECTS}/jobs/{JOB}/checkpoints/*"],
            },
            {
                "Sid": "List0",
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": OBJECTS,
                "Condition": {"StringLike": {"s3:prefix": [f"jobs/{JOB}/*", "examples/code/*"]}},
            },
            {
                "Sid": "List1",
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": "arn:aws:s3:::data-bucket",
                "Condition": {"StringLike": {"s3:prefix": ["sets/train/*"]}},
            },
            {
                "Sid": "Log",
                "Effect": "Allow",
                "Action": ["logs:PutLogEvents"],
                "Resource": f"arn:aws:logs:*:*:log-group:*:log-stream:{JOB}/attempt-002",
            },
        ],
    }


@pytest.mark.parametrize(
    "key",
    [
        agent_command_key(OTHER, 1, "train"),
        commit_marker_key(OTHER, 100),
        f"jobs/{OTHER}/output/model.npy",
        f"jobs/{JOB}x/output/model.npy",  # a job id that extends this one is another job
    ],
)
def test_another_jobs_objects_are_neither_read_nor_written(key):
    # Given the policy of one job
    policy = statements(job_session_policy(JOB, 1, manifest(), jobs_bucket=JOBS))

    # When another job's objects are asked for, Then nothing is allowed
    for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
        assert not allowed(policy, action, f"{OBJECTS}/{key}"), (action, key)
    assert not allowed(policy, "s3:ListBucket", OBJECTS, {"s3:prefix": f"jobs/{OTHER}/"})
    assert not allowed(policy, "s3:ListBucket", OBJECTS, {"s3:prefix": "jobs/"})


def test_the_jobs_own_command_documents_are_read_but_never_written():
    # Given the policy of one job
    policy = statements(job_session_policy(JOB, 1, manifest(), jobs_bucket=JOBS))
    command = f"{OBJECTS}/{agent_command_key(JOB, 1, 'train')}"

    # Then its command document is read, not rewritten nor deleted
    assert allowed(policy, "s3:GetObject", command)
    assert not allowed(policy, "s3:PutObject", command)
    assert not allowed(policy, "s3:DeleteObject", command)
    # and its own checkpoints are written, pruned and listed; another attempt's log is not written
    assert allowed(policy, "s3:PutObject", f"{OBJECTS}/{commit_marker_key(JOB, 100)}")
    assert allowed(policy, "s3:DeleteObject", f"{OBJECTS}/{commit_marker_key(JOB, 100)}")
    assert allowed(policy, "s3:ListBucket", OBJECTS, {"s3:prefix": f"jobs/{JOB}/checkpoints/"})
    assert not allowed(policy, "s3:PutObject", f"{OBJECTS}/jobs/{JOB}/logs/attempt-002.log")
    assert not allowed(policy, "s3:DeleteObject", f"{OBJECTS}/jobs/{JOB}/output/model.npy")


def test_the_inputs_are_read_and_nothing_beside_them():
    # Given the policy of one job
    policy = statements(job_session_policy(JOB, 1, manifest(), jobs_bucket=JOBS))

    # Then its inputs are read, an object input exactly, and nothing else of the data bucket
    assert allowed(policy, "s3:GetObject", "arn:aws:s3:::data-bucket/sets/train/part-0")
    assert allowed(policy, "s3:GetObject", "arn:aws:s3:::data-bucket/sets/labels.csv")
    assert not allowed(policy, "s3:GetObject", "arn:aws:s3:::data-bucket/sets/labels.csv.bak")
    assert not allowed(policy, "s3:GetObject", "arn:aws:s3:::data-bucket/sets/test/part-0")
    assert not allowed(policy, "s3:PutObject", "arn:aws:s3:::data-bucket/sets/train/part-0")
    assert not allowed(policy, "s3:ListBucket", "arn:aws:s3:::data-bucket", {"s3:prefix": "sets/"})


def test_a_resumed_job_reads_the_checkpoints_of_the_job_it_resumes_and_writes_none_of_them():
    # Given a job resuming from another's checkpoints
    policy = statements(job_session_policy(JOB, 1, manifest(resume_from=OTHER), jobs_bucket=JOBS))

    # Then it reads and lists that job's checkpoints, and nothing else of it
    assert allowed(policy, "s3:GetObject", f"{OBJECTS}/{commit_marker_key(OTHER, 100)}")
    assert allowed(policy, "s3:ListBucket", OBJECTS, {"s3:prefix": f"jobs/{OTHER}/checkpoints/"})
    assert not allowed(policy, "s3:PutObject", f"{OBJECTS}/{commit_marker_key(OTHER, 100)}")
    assert not allowed(policy, "s3:GetObject", f"{OBJECTS}/{agent_command_key(OTHER, 1, 'train')}")


@pytest.mark.parametrize(
    "source", [f"s3://{JOBS}/", f"s3://{JOBS}/jobs/", f"s3://{JOBS}/jobs/{OTHER}/output/"]
)
def test_an_input_over_the_jobs_prefix_is_refused(source):
    # Given a manifest whose input is the jobs bucket's root, its jobs/ or another job's prefix
    document = manifest(source, LABELS)

    # When its policy is built, Then it is refused: it would open other jobs' objects
    with pytest.raises(JobAccessRefused, match="overlaps the jobs bucket's jobs/"):
        job_session_policy(JOB, 1, document, jobs_bucket=JOBS)


def test_wildcards_in_a_manifest_key_are_literal():
    # Given an input whose key holds IAM's wildcard characters
    document = manifest(TRAIN, "s3://data-bucket/a*b?c$d")

    # When its policy is built
    policy = statements(job_session_policy(JOB, 1, document, jobs_bucket=JOBS))

    # Then the key is matched as written, never as a pattern
    assert "arn:aws:s3:::data-bucket/a${*}b${?}c${$}d" in policy[0]["Resource"]
    assert allowed(policy, "s3:GetObject", "arn:aws:s3:::data-bucket/a*b?c$d")
    assert not allowed(policy, "s3:GetObject", "arn:aws:s3:::data-bucket/aXXbYc$d")


def test_iam_patterns_match_wildcards_and_literals():
    # Given IAM patterns, Then * and ? are wildcards, ${*} ${?} ${$} the characters, and [ ] nothing special
    assert like("a*c", "abbbc")
    assert like("a?c", "abc")
    assert not like("a?c", "abbc")
    assert like(literal("a*[b]"), "a*[b]")
    assert not like(literal("a*[b]"), "aX[b]")
    assert like("x/${$}{y}", "x/${y}")


def test_a_policy_past_stss_limit_is_refused_with_its_size():
    # Given a manifest of many object inputs
    document = manifest(*(f"s3://data-bucket/objects/file-{n:04d}.bin" for n in range(60)))

    # When its policy is built, Then it is refused as too large for STS
    with pytest.raises(JobAccessRefused, match=f"over STS's {MAX_SESSION_POLICY_CHARS}"):
        job_session_policy(JOB, 1, document, jobs_bucket=JOBS)


def test_the_serialized_policy_is_compact_ascii_json():
    # Given an input key with a non-ASCII character
    document = manifest(TRAIN, "s3://data-bucket/données.csv")

    # When serialized, Then it is compact JSON of ASCII only, the same policy once parsed
    policy = job_session_policy(JOB, 1, document, jobs_bucket=JOBS)
    text = serialize(policy)
    assert text.isascii()
    assert ", " not in text
    assert json.loads(text) == policy

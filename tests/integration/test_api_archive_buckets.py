"""Archive destinations in the deployer's extra archive buckets, through the API function against moto: admitted
at submission, restored like the deployment's own; any other bucket is refused by name, never left out."""

from __future__ import annotations

import boto3
import pytest

from spotrun.aws.adapters import job_store
from spotrun.control.store import update_job
from spotrun.model.job.record import ArchivedObject
from tests.integration.api_client import TINY, call

TEAM = "team-models"


@pytest.fixture
def with_team_bucket(deployment, monkeypatch):
    # Given a deployment whose deployer added a team bucket to archive_buckets
    boto3.client("s3").create_bucket(Bucket=TEAM)
    monkeypatch.setenv("SPOTRUN_ARCHIVE_BUCKETS", TEAM)
    return deployment


def _archived_in(settings, context, bucket: str) -> tuple[str, str]:
    job_id = call(context, "POST", "/jobs", TINY).body["job_id"]
    key = f"models/{job_id}/model.npy"
    boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=b"weights", StorageClass="GLACIER")
    archive = [ArchivedObject(uri=f"s3://{bucket}/{key}", storage_class="GLACIER", size=7, sha256="0" * 64)]
    update_job(
        job_store(settings.jobs_table, settings.region),
        job_id,
        lambda job: job.model_copy(update={"archive": archive}),
    )
    return job_id, key


def test_a_destination_in_an_extra_archive_bucket_is_admitted_and_another_refused(
    with_team_bucket, lambda_context
):
    # When manifests archiving to the team bucket and to an unknown one are posted
    team = {**TINY, "name": "to-team", "archive": {"destination": f"s3://{TEAM}/tiny/"}}
    unknown = {**TINY, "name": "elsewhere", "archive": {"destination": "s3://someone-else/tiny/"}}
    admitted = call(lambda_context, "POST", "/jobs", team)
    refused = call(lambda_context, "POST", "/jobs", unknown)
    # Then the first starts, the second is refused naming the allowed buckets
    assert admitted.status == 202
    assert refused.status == 422
    [line] = refused.body["errors"]
    assert "'someone-else'" in line
    assert f"allowed: spotrun-archive-test, {TEAM}" in line


def test_a_model_archived_in_an_extra_bucket_is_reported_and_restored(with_team_bucket, lambda_context):
    # Given a job whose model sits in GLACIER in the team bucket
    job_id, key = _archived_in(with_team_bucket, lambda_context, TEAM)
    # When its restore state is asked for, then a restore is started
    before = call(lambda_context, "GET", f"/jobs/{job_id}/restore")
    started = call(lambda_context, "POST", f"/jobs/{job_id}/restore")
    # Then the object is listed (not dropped), archived first, readable once restored (moto restores at once)
    assert before.status == 200
    assert [(o["uri"], o["state"]) for o in before.body["objects"]] == [(f"s3://{TEAM}/{key}", "archived")]
    assert before.body["readable"] is False
    assert started.status == 202
    assert started.body["readable"] is True
    assert boto3.client("s3").get_object(Bucket=TEAM, Key=key)["Body"].read() == b"weights"


def test_a_model_in_a_bucket_no_longer_granted_is_refused_by_name_not_called_readable(
    deployment, lambda_context
):
    # Given a job archived in a bucket that is not (or no longer) among the deployment's archive buckets
    boto3.client("s3").create_bucket(Bucket=TEAM)
    job_id, _ = _archived_in(deployment, lambda_context, TEAM)
    # When its restore state is asked for
    answer = call(lambda_context, "GET", f"/jobs/{job_id}/restore")
    # Then it is a 409 naming the bucket and the option, never readable with an empty list
    assert answer.status == 409
    assert TEAM in answer.body["message"]
    assert "archive_buckets" in answer.body["message"]

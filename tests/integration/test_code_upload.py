"""POST /code through the API function, and the presigned PUT it signs against the emulator's S3."""

from __future__ import annotations

import base64
import hashlib
import urllib.error
import urllib.request
from collections.abc import Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer

from functions.runtime import reset
from spotrun.aws.objects import S3Objects
from spotrun.control.code_upload import CodeUploadRequest, request_code_upload
from spotrun.local.patches import s3_integrity
from spotrun.local.patches.reversible import PatchSet
from tests.integration.api_client import call

BODY = b"a packed workdir"
SHA = hashlib.sha256(BODY).hexdigest()


def test_a_missing_archive_gets_a_presigned_put_and_an_existing_one_none(deployment, lambda_context):
    # Given no archive of that digest in the jobs bucket
    # When the CLI asks for its upload
    first = call(lambda_context, "POST", "/code", {"sha256": SHA, "size": len(BODY)})
    # Then it gets the content address and a PUT signing the length, type and checksum
    assert first.status == 200
    key = f"code/{SHA}.tar.gz"
    assert first.body["uri"] == f"s3://{deployment.jobs_bucket}/{key}"
    upload = first.body["upload"]
    assert upload["headers"] == {
        "content-length": str(len(BODY)),
        "content-type": "application/gzip",
        "x-amz-checksum-sha256": base64.b64encode(hashlib.sha256(BODY).digest()).decode(),
    }
    assert "X-Amz-SignedHeaders=content-length%3Bcontent-type%3Bhost%3Bx-amz-checksum-sha256" in upload["url"]
    # When the object exists and it asks again
    boto3.client("s3").put_object(Bucket=deployment.jobs_bucket, Key=key, Body=BODY)
    second = call(lambda_context, "POST", "/code", {"sha256": SHA, "size": len(BODY)})
    # Then there is nothing to upload
    assert second.status == 200
    assert second.body == {"uri": first.body["uri"], "upload": None}


def test_an_invalid_request_is_refused_naming_its_field(deployment, lambda_context):
    # Given requests with a digest not in lower-case hex, or too short, an empty or too large archive, or a key
    refused = [
        ({"sha256": SHA.upper(), "size": 1}, "sha256"),
        ({"sha256": "ab" * 16, "size": 1}, "sha256"),
        ({"sha256": SHA, "size": 0}, "size"),
        ({"sha256": SHA, "size": 5 * 1024**3 + 1}, "size"),
        ({"sha256": SHA, "size": 1, "key": "jobs/other/x"}, "key"),
    ]
    for body, field in refused:
        # When each is posted, Then it is a 422 naming the field
        answer = call(lambda_context, "POST", "/code", body)
        assert answer.status == 422, body
        assert any(field in line for line in answer.body["errors"]), answer.body


@pytest.fixture
def emulated_s3(monkeypatch) -> Iterator[str]:
    """moto's S3 server with the emulator's upload checks, a jobs bucket, and the adapters pointed at it."""
    server = ThreadedMotoServer(port=0, verbose=False)
    server.start()
    patches = PatchSet()
    s3_integrity.install(patches)
    endpoint = f"http://127.0.0.1:{server._server.server_port}"  # type: ignore[union-attr]
    for name, value in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    reset()
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="spotrun-jobs-test")
    try:
        yield "spotrun-jobs-test"
    finally:
        reset()
        patches.undo_all()
        server.stop()


def put(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="PUT", headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request) as answer:  # noqa: S310 - the local emulator
            return answer.status, b""
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_presigned_put_stores_those_bytes_or_nothing(emulated_s3):
    # Given an upload asked for the archive
    objects = S3Objects("us-east-1")
    target = request_code_upload(
        CodeUploadRequest(sha256=SHA, size=len(BODY)), objects=objects, jobs_bucket=emulated_s3
    ).upload
    assert target is not None
    wrong_checksum = base64.b64encode(hashlib.sha256(b"other bytes, same len").digest()).decode()
    # When other bytes of the same length are sent with the signed headers
    other = put(target.url, b"x" * len(BODY), target.headers)
    # or without the signed checksum, or with another checksum and those other bytes
    unsigned = put(
        target.url, BODY, {k: v for k, v in target.headers.items() if k != "x-amz-checksum-sha256"}
    )
    forged = put(target.url, b"x" * len(BODY), {**target.headers, "x-amz-checksum-sha256": wrong_checksum})
    # Then S3 refuses each, and stores nothing
    assert other[0] == 400
    assert b"BadDigest" in other[1]
    assert (unsigned[0], forged[0]) == (403, 403)
    assert b"SignatureDoesNotMatch" in unsigned[1]
    assert b"SignatureDoesNotMatch" in forged[1]
    assert objects.head(emulated_s3, f"code/{SHA}.tar.gz") is None
    # When the archive itself is sent as signed
    assert put(target.url, BODY, target.headers)[0] == 200
    # Then it is stored, and the next request needs no upload
    assert objects.get_bytes(emulated_s3, f"code/{SHA}.tar.gz") == BODY
    again = request_code_upload(
        CodeUploadRequest(sha256=SHA, size=len(BODY)), objects=objects, jobs_bucket=emulated_s3
    )
    assert again.upload is None

"""The emulator checks every checksum header a PUT carries, as S3 does, the agent's part CRC-32s included."""

from __future__ import annotations

import base64
import hashlib
import os
import zlib
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from awscrt import checksums
from botocore.exceptions import ClientError
from moto import mock_aws

from spotrun.agent.transfer import upload
from spotrun.agent.transfer.upload import MULTIPART_THRESHOLD, upload_file
from spotrun.local.patches import s3_integrity
from spotrun.local.patches.reversible import PatchSet

BUCKET = "put-checksums"
BODY = os.urandom(70_000)
OTHER = os.urandom(70_000)


def _checksum(algorithm: str, data: bytes) -> str:
    """The value S3 expects in ``x-amz-checksum-<algorithm>``, computed here independently of the emulator."""
    digest = {
        "SHA256": lambda: hashlib.sha256(data).digest(),
        "SHA1": lambda: hashlib.sha1(data, usedforsecurity=False).digest(),
        "CRC32": lambda: zlib.crc32(data).to_bytes(4, "big"),
        "CRC32C": lambda: checksums.crc32c(data).to_bytes(4, "big"),
        "CRC64NVME": lambda: checksums.crc64nvme(data).to_bytes(8, "big"),
    }[algorithm]()
    return base64.b64encode(digest).decode()


@pytest.fixture
def s3() -> Iterator[Any]:
    """moto's S3 in this process with the emulator's upload patch, and one bucket."""
    patches = PatchSet()
    s3_integrity.install(patches)
    try:
        with mock_aws():
            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket=BUCKET)
            yield client
    finally:
        patches.undo_all()


@pytest.mark.parametrize("algorithm", ["SHA256", "SHA1", "CRC32", "CRC32C", "CRC64NVME"])
def test_a_put_whose_checksum_differs_from_its_body_is_refused_and_stores_nothing(s3, algorithm):
    # Given a body, and its checksum with each algorithm S3 offers
    member = f"Checksum{algorithm}"

    # When it is put with its own checksum, then under another key with the checksum of other bytes
    s3.put_object(Bucket=BUCKET, Key="right", Body=BODY, **{member: _checksum(algorithm, BODY)})
    with pytest.raises(ClientError) as refused:
        s3.put_object(Bucket=BUCKET, Key="wrong", Body=BODY, **{member: _checksum(algorithm, OTHER)})

    # Then the first is stored, the second refused with BadDigest naming the algorithm, and not stored
    assert s3.get_object(Bucket=BUCKET, Key="right")["Body"].read() == BODY
    assert refused.value.response["Error"]["Code"] == "BadDigest"
    assert algorithm in refused.value.response["Error"]["Message"]
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="wrong")


def test_the_agents_multipart_upload_has_each_parts_crc32_checked(s3, tmp_path, monkeypatch):
    # Given a file large enough for a multipart upload, and an agent whose part CRC-32s are off by one bit
    source = tmp_path / "model.bin"
    source.write_bytes(os.urandom(MULTIPART_THRESHOLD + 12_345))
    real_crc32 = upload.crc32
    monkeypatch.setattr(upload, "crc32", lambda data, value=0: real_crc32(data, value) ^ 1)

    # When the agent uploads it
    with pytest.raises(ClientError) as refused:
        upload_file(s3, source, BUCKET, "jobs/j/model.bin")

    # Then the emulator refused a part, as S3 would, and no object was made
    assert refused.value.response["Error"]["Code"] == "BadDigest"
    assert "CRC32" in refused.value.response["Error"]["Message"]
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="jobs/")

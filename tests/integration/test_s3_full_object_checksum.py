"""The emulator's multipart completion: moto's FULL_OBJECT checksum, computed part by part without copies."""

from __future__ import annotations

import base64
import os
import zlib
from collections.abc import Iterator

import boto3
import pytest
from awscrt import checksums
from moto import mock_aws
from moto.s3.models import MultipartChecksumBuilder

from spotrun.local.patches import s3_integrity
from spotrun.local.patches.reversible import PatchSet

BUCKET = "full-object-checksums"
PARTS = [os.urandom(5 * 1024 * 1024), os.urandom(5 * 1024 * 1024), os.urandom(1024 * 1024 + 7)]
WHOLE = b"".join(PARTS)
EXPECTED = {  # computed over the whole object at once, independently of moto and of the patch
    "CRC32": zlib.crc32(WHOLE).to_bytes(4, "big"),
    "CRC32C": checksums.crc32c(WHOLE).to_bytes(4, "big"),
    "CRC64NVME": checksums.crc64nvme(WHOLE).to_bytes(8, "big"),
}


@pytest.fixture
def patched() -> Iterator[None]:
    patches = PatchSet()
    s3_integrity.install(patches)
    yield
    patches.undo_all()


@pytest.mark.parametrize("algorithm", sorted(EXPECTED))
def test_the_builder_keeps_a_running_crc_instead_of_the_parts_and_gives_moto_s_value(patched, algorithm):
    # Given moto's builder for a FULL_OBJECT upload, under the emulator's patch
    builder = MultipartChecksumBuilder(algorithm, "FULL_OBJECT")

    # When the parts are added as moto's completion adds them
    for part in PARTS:
        builder.addPart(part)

    # Then it holds none of their bytes, and builds the whole object's checksum, one part counted as moto does
    assert len(builder.complete_object) == 0
    assert builder.build() == ("FULL_OBJECT", base64.b64encode(EXPECTED[algorithm]).decode(), 1)


def test_a_composite_checksum_is_left_to_moto(patched):
    # Given a COMPOSITE CRC-32 upload (a checksum of the parts' checksums, not of the bytes)
    builder = MultipartChecksumBuilder("CRC32", "COMPOSITE")

    # When the parts are added
    for part in PARTS:
        builder.addPart(part)

    # Then moto's own composite value comes out, with the number of parts
    parts_crcs = b"".join(zlib.crc32(part).to_bytes(4, "big") for part in PARTS)
    expected = base64.b64encode(zlib.crc32(parts_crcs).to_bytes(4, "big")).decode()
    assert builder.build() == ("COMPOSITE", expected, len(PARTS))


@pytest.mark.parametrize("algorithm", sorted(EXPECTED))
def test_a_completed_upload_reports_the_full_object_checksum_of_its_bytes(patched, algorithm):
    # Given a multipart upload declaring a FULL_OBJECT checksum with each algorithm S3 offers one for
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        upload_id = s3.create_multipart_upload(
            Bucket=BUCKET, Key="k", ChecksumAlgorithm=algorithm, ChecksumType="FULL_OBJECT"
        )["UploadId"]
        parts = [
            {
                "PartNumber": number,
                "ETag": s3.upload_part(
                    Bucket=BUCKET, Key="k", UploadId=upload_id, PartNumber=number, Body=body
                )["ETag"],
            }
            for number, body in enumerate(PARTS, start=1)
        ]

        # When it completes
        s3.complete_multipart_upload(
            Bucket=BUCKET, Key="k", UploadId=upload_id, MultipartUpload={"Parts": parts}
        )
        head = s3.head_object(Bucket=BUCKET, Key="k", ChecksumMode="ENABLED")

    # Then the object reports the checksum of its whole bytes
    assert head[f"Checksum{algorithm}"] == base64.b64encode(EXPECTED[algorithm]).decode()
    assert head["ChecksumType"] == "FULL_OBJECT"

"""Staging takes botocore's running checksum of a body it validates instead of hashing the bytes again."""

from __future__ import annotations

import base64
import hashlib
import io
import random
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from awscrt import checksums
from botocore import httpchecksum

from spotrun.agent.transfer import integrity
from spotrun.agent.transfer.download import StageItem, StagingError, download_verified
from spotrun.agent.transfer.integrity import Expectation, StreamDigest, sdk_checksum
from spotrun.agent.transfer.ranges import MIB, RANGED_THRESHOLD
from spotrun.agent.transfer.upload import upload_file
from tests.integration.conftest import AGENT_BUCKET as BUCKET
from tests.integration.conftest import corrupt_in_storage

BODY = random.Random(12).randbytes(3 * 1024 * 1024 + 5)


@pytest.mark.parametrize(("algorithm", "check"), [("SHA256", "sha256"), ("CRC64NVME", "crc64nvme")])
def test_a_whole_get_is_verified_from_botocores_digest_without_a_second_hash(
    s3, tmp_path, hashed, crc_calls, algorithm, check
):
    # Given an object uploaded in one PUT carrying its SHA-256, or only a CRC-64/NVME (what S3 adds when a
    # client sends no checksum)
    s3.put_object(Bucket=BUCKET, Key="data/weights.bin", Body=BODY, ChecksumAlgorithm=algorithm)
    item = StageItem(BUCKET, "data/weights.bin", tmp_path / "out" / "weights.bin", size=len(BODY))
    item.destination.parent.mkdir()

    # When it is staged (one GET: under the ranged threshold)
    staged = download_verified(s3, item, root=tmp_path / "out")

    # Then it is checked against that checksum, and staging computed none of its own: botocore's was used
    assert staged.algorithm == check
    assert item.destination.read_bytes() == BODY
    assert hashed == []
    assert crc_calls == []


def test_a_marker_digest_is_still_checked_against_botocores_digest(s3, tmp_path, hashed):
    # Given an object S3 agrees with, and a commit marker's SHA-256 that differs from its bytes
    source = tmp_path / "weights.bin"
    source.write_bytes(BODY)
    upload_file(s3, source, BUCKET, "data/weights.bin")
    wrong = hashlib.sha256(b"another file").hexdigest()
    item = StageItem(BUCKET, "data/weights.bin", tmp_path / "out" / "weights.bin", sha256=wrong)
    item.destination.parent.mkdir()

    # When it is staged, Then the marker's digest fails it, with no file left
    with pytest.raises(StagingError, match="expected digest"):
        download_verified(s3, item, root=tmp_path / "out")
    assert not item.destination.exists()


def _botocore_body(data: bytes, checksum: Any, expected: str) -> Any:
    return httpchecksum.StreamingChecksumBody(io.BytesIO(data), len(data), checksum, expected)


def test_a_botocore_checksum_of_another_algorithm_is_not_taken_for_the_expected_one(hashed):
    # Given a body botocore validates by its CRC-32, and an expectation of the object's SHA-256
    crc = base64.b64encode(zlib.crc32(BODY).to_bytes(4, "big")).decode()
    body = _botocore_body(BODY, httpchecksum.Crc32Checksum(), crc)
    sha = base64.b64encode(hashlib.sha256(BODY).digest()).decode()
    expectation = Expectation(len(BODY), "sha256", sha)

    # When staging asks for a shared checksum, Then there is none: it hashes the bytes itself, and they pass
    shared = sdk_checksum(body, "sha256")
    assert shared is None
    digest = StreamDigest(expectation, shared=shared)
    while chunk := body.read(1024 * 1024):
        digest.update(chunk)
    assert hashed == ["sha256"]
    assert digest.problems() == []


def test_a_shared_crc32_is_compared_as_the_objects_checksum(hashed):
    # Given a body botocore validates by its CRC-32 (the header right), and an expectation of another CRC-32
    crc = base64.b64encode(zlib.crc32(BODY).to_bytes(4, "big")).decode()
    body = _botocore_body(BODY, httpchecksum.Crc32Checksum(), crc)
    other = base64.b64encode(zlib.crc32(b"other").to_bytes(4, "big")).decode()
    expectation = Expectation(len(BODY), "crc32", other)

    # When the body is read through a digest sharing botocore's CRC-32
    digest = StreamDigest(expectation, shared=sdk_checksum(body, "crc32"))
    while chunk := body.read(1024 * 1024):
        digest.update(chunk)

    # Then staging's check fails too, from botocore's digest, without a CRC of its own
    assert digest.problems() == ["CRC32 differs from the object's ChecksumCRC32"]
    assert hashed == []


def test_a_whole_get_checked_by_crc32_is_hashed_by_the_agents_fast_crc32_not_botocores(
    s3, tmp_path, crc_calls
):
    # Given an object carrying a full-object CRC-32 (as the SDKs upload by default)
    s3.put_object(Bucket=BUCKET, Key="data/crc.bin", Body=BODY, ChecksumAlgorithm="CRC32")
    item = StageItem(BUCKET, "data/crc.bin", tmp_path / "out" / "crc.bin", size=len(BODY))
    item.destination.parent.mkdir()

    # When it is staged (one GET)
    staged = download_verified(s3, item, root=tmp_path / "out")

    # Then it is checked by its CRC-32, every byte through the agent's CRC-32 (botocore's zlib one skipped)
    assert staged.algorithm == "crc32"
    assert item.destination.read_bytes() == BODY
    assert sum(size for name, size in crc_calls if name == "crc32") == len(BODY)


def test_without_a_fast_crc32_botocores_running_crc32_is_shared(monkeypatch):
    # Given an agent without ISA-L (its CRC-32 is zlib's, as botocore's), and a body botocore validates by CRC-32
    monkeypatch.setattr(integrity, "crc32", zlib.crc32)
    crc = base64.b64encode(zlib.crc32(BODY).to_bytes(4, "big")).decode()
    body = _botocore_body(BODY, httpchecksum.Crc32Checksum(), crc)

    # When staging chooses how to read it
    read, shared = integrity.body_reader(body, "crc32")

    # Then it reads through botocore and shares its checksum (one pass, as before)
    assert shared is body.checksum
    assert read == body.read


def test_a_body_read_past_botocores_crc32_still_fails_on_a_wrong_checksum():
    # Given a body whose CRC-32 header is wrong, read the fast way (botocore's own check skipped)
    other = base64.b64encode(zlib.crc32(b"other").to_bytes(4, "big")).decode()
    body = _botocore_body(BODY, httpchecksum.Crc32Checksum(), other)
    read, shared = integrity.body_reader(body, "crc32")
    digest = StreamDigest(Expectation(len(BODY), "crc32", other), shared=shared)

    # When every byte is read
    while chunk := read(1024 * 1024):
        digest.update(chunk)

    # Then staging's own CRC-32 finds the mismatch
    assert shared is None
    assert digest.problems() == ["CRC32 differs from the object's ChecksumCRC32"]


def _crc64nvme_b64(data: bytes) -> str:
    return base64.b64encode(checksums.crc64nvme(data).to_bytes(8, "big")).decode()


def _put_multipart_crc64nvme(s3: Any, key: str, body: bytes) -> None:
    """A multipart upload of checksum type FULL_OBJECT / CRC64NVME, in parts of 8 MiB."""
    upload = s3.create_multipart_upload(
        Bucket=BUCKET, Key=key, ChecksumAlgorithm="CRC64NVME", ChecksumType="FULL_OBJECT"
    )["UploadId"]
    parts = []
    for number, start in enumerate(range(0, len(body), 8 * MIB), start=1):
        piece = body[start : start + 8 * MIB]
        sent = s3.upload_part(
            Bucket=BUCKET,
            Key=key,
            UploadId=upload,
            PartNumber=number,
            Body=piece,
            ChecksumAlgorithm="CRC64NVME",
            ChecksumCRC64NVME=_crc64nvme_b64(piece),
        )
        parts.append({"PartNumber": number, "ETag": sent["ETag"], "ChecksumCRC64NVME": _crc64nvme_b64(piece)})
    s3.complete_multipart_upload(
        Bucket=BUCKET,
        Key=key,
        UploadId=upload,
        MultipartUpload={"Parts": parts},
        ChecksumType="FULL_OBJECT",
        ChecksumCRC64NVME=_crc64nvme_b64(body),
    )


def test_a_ranged_object_with_a_crc64nvme_is_checked_by_its_ranges_crcs_combined(s3, tmp_path, crc_calls):
    # Given a multipart object of FULL_OBJECT checksum type CRC64NVME, large enough to be ranged
    body = random.Random(64).randbytes(RANGED_THRESHOLD + 3 * MIB + 11)
    _put_multipart_crc64nvme(s3, "data/big.bin", body)
    item = StageItem(BUCKET, "data/big.bin", tmp_path / "out" / "big.bin", size=len(body))
    item.destination.parent.mkdir()

    # When it is staged in ranges
    with ThreadPoolExecutor(max_workers=4) as ranges:
        staged = download_verified(s3, item, root=tmp_path / "out", ranged_pool=ranges)

    # Then every byte went once through a CRC-64/NVME, by range, and the combined CRC matched S3's
    assert staged.algorithm == "crc64nvme"
    assert staged.requests > 1
    assert item.destination.read_bytes() == body
    assert sum(size for name, size in crc_calls if name == "crc64nvme") == len(body)


def test_a_ranged_object_that_differs_from_its_crc64nvme_fails_and_leaves_no_file(s3, tmp_path):
    # Given a ranged object whose stored bytes no longer match its CRC-64/NVME
    body = random.Random(65).randbytes(RANGED_THRESHOLD + MIB)
    _put_multipart_crc64nvme(s3, "data/rot.bin", body)
    corrupt_in_storage(BUCKET, "data/rot.bin")
    item = StageItem(BUCKET, "data/rot.bin", tmp_path / "out" / "rot.bin", size=len(body))
    item.destination.parent.mkdir()

    # When it is staged in ranges, Then both attempts fail on the checksum, and nothing is left behind
    with (
        ThreadPoolExecutor(max_workers=4) as ranges,
        pytest.raises(StagingError, match="CRC64NVME differs from the object's ChecksumCRC64NVME"),
    ):
        download_verified(s3, item, root=tmp_path / "out", ranged_pool=ranges)
    assert list(item.destination.parent.iterdir()) == []

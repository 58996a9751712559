"""Staging's small objects through the CRT's S3 client, against the emulator's S3 over HTTP, verified."""

from __future__ import annotations

import base64
import errno
import hashlib
import os
import random
from typing import Any

import pytest
from awscrt import checksums
from botocore.config import Config

from spotrun.agent.transfer import crcs, crt_gets, file_writes
from spotrun.agent.transfer.client_config import transfer_config
from spotrun.agent.transfer.download import StagingError, download_verified, plan_input, stage
from tests.integration.conftest import corrupt_in_storage
from tests.integration.crt.conftest import BODY, BUCKET, client_of, item_for, uploaded

pytestmark = pytest.mark.skipif(
    not crt_gets.crt_available(), reason="the agent extra (awscrt) is not installed"
)


def test_the_crt_fetches_small_objects_and_each_is_hashed_once_for_its_crc32(
    s3, tmp_path, gets, direct, hashed, read_back
):
    # Given 20 objects of under 256 KiB uploaded as the agent uploads them (each with its CRC-32)
    bodies = {
        f"data/part-{index:02d}.bin": random.Random(index).randbytes(200_000 + index) for index in range(20)
    }
    for key, body in bodies.items():
        uploaded(s3, tmp_path, key, body)
    out = tmp_path / "job"
    out.mkdir()

    # When they are staged with the CRT's getter
    report = stage(s3, plan_input(s3, f"s3://{BUCKET}/data/", out), root=out, direct=direct)

    # Then every byte arrived, no GET went through boto3, and each file went once through the CRC-32 S3 keeps,
    # as it was written: none was read back
    assert report.files == 20
    assert {f"data/{path.name}": path.read_bytes() for path in out.iterdir()} == bodies
    assert gets == []
    assert hashed == ["crc32"] * 20
    assert read_back == []


def test_an_object_with_its_sha256_is_read_back_once_for_it(s3, tmp_path, direct, hashed, read_back):
    # Given an object carrying only its SHA-256
    s3.put_object(Bucket=BUCKET, Key="data/w.bin", Body=BODY, ChecksumAlgorithm="SHA256")

    # When the CRT stages it
    staged = download_verified(s3, item_for(tmp_path, "data/w.bin"), root=tmp_path / "out", direct=direct)

    # Then the written file was hashed once, from the page cache, for that SHA-256
    assert staged.algorithm == "sha256"
    assert read_back == ["sha256"]
    assert [name for name in hashed if name == "sha256"] == ["sha256"]


def test_a_body_in_pieces_out_of_order_is_written_in_place_and_gives_no_crc(tmp_path):
    # Given the CRT's callbacks over a new file, for two responses that carry a CRC-32
    descriptor = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    in_order, out_of_order = (crt_gets._Response(descriptor, want_crc32=True) for _ in range(2))
    for response in (in_order, out_of_order):
        response.on_headers(headers=[("x-amz-checksum-crc32", "AAAAAA==")])

    # When one receives its pieces in order and the other does not
    in_order.on_body(b"abc", 0)
    in_order.on_body(b"def", 3)
    out_of_order.on_body(b"def", 3)
    out_of_order.on_body(b"abc", 0)
    os.close(descriptor)

    # Then both wrote every byte in place; only the first has a CRC-32, of the whole body
    assert (tmp_path / "f").read_bytes() == b"abcdef"
    assert in_order.crc32 == crcs.crc32(b"abcdef")
    assert out_of_order.crc32 is None


@pytest.mark.parametrize(
    ("algorithm", "field", "digest"),
    [
        ("SHA256", "ChecksumSHA256", hashlib.sha256(BODY).digest()),
        ("CRC32", "ChecksumCRC32", crcs.crc32(BODY).to_bytes(4, "big")),
        ("CRC64NVME", "ChecksumCRC64NVME", checksums.crc64nvme(BODY).to_bytes(8, "big")),
    ],
)
def test_the_crts_get_asks_for_the_objects_checksum_and_gets_it(
    s3, tmp_path, direct, algorithm, field, digest
):
    # Given an object carrying its checksum
    s3.put_object(Bucket=BUCKET, Key="data/w.bin", Body=BODY, ChecksumAlgorithm=algorithm)
    item = item_for(tmp_path, "data/w.bin")

    # When the CRT gets it
    descriptor = os.open(item.destination, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    got = direct.get_into(BUCKET, "data/w.bin", descriptor)

    # Then the response carried the checksum, and the body is in the file
    assert got.response[field] == base64.b64encode(digest).decode()
    assert got.response["ContentLength"] == len(BODY)
    assert item.destination.read_bytes() == BODY
    # and the CRC-32 of what was written came with it when the object carries one
    assert got.crc32 == (crcs.crc32(BODY) if algorithm == "CRC32" else None)


def test_the_crts_body_is_written_64_kib_at_a_time_and_a_failed_write_fails_the_get(
    s3, tmp_path, direct, monkeypatch, pwrites
):
    # Given an object of 1 MiB and 3 bytes, and every pwrite this process makes recorded
    uploaded(s3, tmp_path, "data/w.bin")
    item = item_for(tmp_path, "data/w.bin")

    # When the CRT gets it
    descriptor = os.open(item.destination, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        direct.get_into(BUCKET, "data/w.bin", descriptor)
    finally:
        os.close(descriptor)

    # Then staging wrote the body itself, in pieces of at most 64 KiB (file_writes), and the file is the object
    assert pwrites
    assert max(pwrites) <= file_writes.WRITE_BYTES
    assert sum(pwrites) == len(BODY)
    assert item.destination.read_bytes() == BODY

    # Given a disk that is full / When the CRT gets the object again / Then the GET fails, naming why
    def full(descriptor: int, data: Any, position: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    descriptor = os.open(tmp_path / "again.bin", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with pytest.raises(crt_gets.DirectGetError, match="No space left on device"):
            direct.get_into(BUCKET, "data/w.bin", descriptor)
    finally:
        os.close(descriptor)


@pytest.mark.parametrize(
    ("algorithm", "finding"),
    [
        ("SHA256", "SHA-256 differs from the object's ChecksumSHA256"),
        ("CRC32", "CRC32 differs from the object's ChecksumCRC32"),
        ("CRC64NVME", "CRC64NVME differs from the object's ChecksumCRC64NVME"),
    ],
)
def test_a_body_that_differs_from_s3s_checksum_fails_and_leaves_no_file(
    s3, tmp_path, direct, algorithm, finding
):
    # Given an object whose stored body no longer matches the checksum S3 keeps for it
    s3.put_object(Bucket=BUCKET, Key="data/bad.bin", Body=BODY, ChecksumAlgorithm=algorithm)
    corrupt_in_storage(BUCKET, "data/bad.bin")
    item = item_for(tmp_path, "data/bad.bin")

    # When it is staged through the CRT, Then both attempts fail on the checksum, and nothing is left behind
    with pytest.raises(StagingError, match=finding):
        download_verified(s3, item, root=item.destination.parent, direct=direct)
    assert list(item.destination.parent.iterdir()) == []


def test_a_commit_markers_sha256_is_what_the_body_is_checked_against(s3, tmp_path, direct, hashed):
    # Given an object carrying only a CRC-32, and a marker's SHA-256 of its bytes
    s3.put_object(Bucket=BUCKET, Key="ckpt/model.pt", Body=BODY, ChecksumAlgorithm="CRC32")
    right = hashlib.sha256(BODY).hexdigest()

    # When it is restored with that SHA-256, Then it passes, hashed once for that SHA-256
    staged = download_verified(
        s3, item_for(tmp_path, "ckpt/model.pt", sha256=right), root=tmp_path / "out", direct=direct
    )
    assert staged.algorithm == "sha256"
    assert hashed == ["sha256"]

    # And when the marker's SHA-256 is another file's, Then it fails, with no file left
    other = item_for(tmp_path, "ckpt/model.pt", sha256=hashlib.sha256(b"another file").hexdigest())
    other.destination.unlink()
    with pytest.raises(StagingError, match="SHA-256 differs from the expected digest"):
        download_verified(s3, other, root=tmp_path / "out", direct=direct)
    assert list((tmp_path / "out").iterdir()) == []


def test_an_object_without_a_checksum_is_checked_against_its_etag_after_the_crt_wrote_it(
    endpoint, s3, tmp_path, direct, hashed
):
    # Given an object stored without any checksum (a client that sends none): only its ETag's MD5
    plain = client_of(endpoint, transfer_config().merge(Config(request_checksum_calculation="when_required")))
    plain.put_object(Bucket=BUCKET, Key="data/plain.bin", Body=BODY)
    item = item_for(tmp_path, "data/plain.bin")

    # When it is staged through the CRT
    staged = download_verified(s3, item, root=item.destination.parent, direct=direct)

    # Then the file was read back once for its MD5, and matches
    assert staged.algorithm == "md5"
    assert hashed == ["md5"]
    assert item.destination.read_bytes() == BODY


def test_a_missing_object_names_s3s_error_and_leaves_no_file(s3, tmp_path, direct):
    # Given a key that does not exist
    item = item_for(tmp_path, "data/missing.bin")

    # When it is staged, Then the error is S3's, and the directory holds nothing
    with pytest.raises(StagingError, match=r"HTTP 404 \(NoSuchKey\)"):
        download_verified(s3, item, root=item.destination.parent, direct=direct)
    assert list(item.destination.parent.iterdir()) == []


def test_a_link_at_the_destination_is_replaced_not_written_through(s3, tmp_path, direct):
    # Given a symbolic link where the file goes, pointing at a file outside the job
    uploaded(s3, tmp_path, "data/w.bin")
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    item = item_for(tmp_path, "data/w.bin")
    item.destination.symlink_to(outside)

    # When it is staged through the CRT
    download_verified(s3, item, root=item.destination.parent, direct=direct)

    # Then the link was replaced by the object, and its target is untouched
    assert not item.destination.is_symlink()
    assert item.destination.read_bytes() == BODY
    assert outside.read_text() == "keep"

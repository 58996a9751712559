"""spotrun.agent.transfer.download: planning, choosing the check, and verified downloads against an in-memory S3."""

from __future__ import annotations

import base64
import hashlib
import io
import threading
import zlib
from pathlib import Path
from typing import Any

import pytest

from spotrun.agent.transfer import integrity
from spotrun.agent.transfer.download import (
    Expectation,
    StageItem,
    StagingError,
    expectation_for,
    plan_input,
    relative_destination,
    stage,
)

BUCKET = "spotrun-jobs-test"


class FakeS3:
    """The calls staging makes, over a dict (ranged GETs too); bodies can be corrupted for the first N reads."""

    def __init__(self, page_size: int = 1000):
        self.objects: dict[str, bytes] = {}
        self.checksum: dict[str, str] = {}  # "sha256", "crc32" or "none"
        self.corrupt_reads: dict[str, int] = {}
        self.truncate_reads: dict[str, int] = {}
        self.gets: dict[str, int] = {}
        self.ranges: dict[str, list[tuple[int, int]]] = {}
        self.heads = 0
        self._computed: dict[str, tuple[bytes, dict[str, Any]]] = {}  # headers, computed once per body
        self.page_size = page_size
        self._lock = threading.Lock()

    def put(self, key: str, body: bytes, checksum: str = "sha256") -> None:
        self.objects[key] = body
        self.checksum[key] = checksum

    def list_objects_v2(self, **kwargs: Any) -> dict[str, Any]:
        keys = sorted(k for k in self.objects if k.startswith(kwargs["Prefix"]))
        start = int(kwargs.get("ContinuationToken", 0))
        page = keys[start : start + self.page_size]
        response: dict[str, Any] = {"Contents": [{"Key": k, "Size": len(self.objects[k])} for k in page]}
        if start + self.page_size < len(keys):
            response.update(IsTruncated=True, NextContinuationToken=str(start + self.page_size))
        return response

    def _headers(self, key: str) -> dict[str, Any]:
        body = self.objects[key]
        cached = self._computed.get(key)
        if cached is not None and cached[0] is body:
            return dict(cached[1])
        response: dict[str, Any] = {
            "ContentLength": len(body),
            "ETag": '"' + hashlib.md5(body, usedforsecurity=False).hexdigest() + '"',
        }
        if self.checksum[key] == "sha256":
            response["ChecksumSHA256"] = base64.b64encode(hashlib.sha256(body).digest()).decode()
        elif self.checksum[key] == "crc32":
            response["ChecksumCRC32"] = base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()
        self._computed[key] = (body, response)
        return dict(response)

    def head_object(self, **kwargs: Any) -> dict[str, Any]:
        assert kwargs.get("ChecksumMode") == "ENABLED"
        with self._lock:
            self.heads += 1
        return self._headers(kwargs["Key"])

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        key = kwargs["Key"]
        body = self.objects[key]
        with self._lock:
            self.gets[key] = self.gets.get(key, 0) + 1
            corrupt = self.corrupt_reads.get(key, 0) > 0
            truncate = self.truncate_reads.get(key, 0) > 0
            if corrupt:
                self.corrupt_reads[key] -= 1
            if truncate:
                self.truncate_reads[key] -= 1
        response = self._headers(key)
        if "Range" in kwargs:
            # As S3: the range's bytes, no full-object checksum, and 412 when IfMatch names another ETag.
            assert kwargs["IfMatch"] == response["ETag"]
            first, last = (int(part) for part in kwargs["Range"].removeprefix("bytes=").split("-"))
            with self._lock:
                self.ranges.setdefault(key, []).append((first, last))
            body = body[first : last + 1]
            response = {"ContentLength": len(body), "ETag": response["ETag"]}
        else:
            assert kwargs.get("ChecksumMode") == "ENABLED"
        sent = body
        if corrupt:
            sent = bytes([body[0] ^ 0xFF]) + body[1:]  # same size, one bit pattern off
        if truncate:
            sent = body[:-1]
        response["Body"] = io.BytesIO(sent)
        return response


def test_relative_destination_keeps_the_path_below_the_prefix(tmp_path):
    # Given / When / Then
    assert relative_destination("data/a/b.bin", "data/", tmp_path) == tmp_path / "a" / "b.bin"
    assert relative_destination("x.bin", "", tmp_path) == tmp_path / "x.bin"


@pytest.mark.parametrize("key", ["data/../escape", "data/a/../../escape", "data//etc/passwd"])
def test_relative_destination_refuses_to_leave_the_directory(tmp_path, key):
    with pytest.raises(StagingError, match="plain relative path"):
        relative_destination(key, "data/", tmp_path)


def test_expectation_prefers_sha256_then_crc32_then_crc64nvme_then_md5():
    # Given responses carrying different checksums
    base = {"ContentLength": 3, "ETag": '"' + "a" * 32 + '"'}

    # When / Then
    assert expectation_for({**base, "ChecksumSHA256": "x=", "ChecksumCRC32": "y="}).algorithm == "sha256"
    assert expectation_for({**base, "ChecksumCRC32": "y=", "ChecksumCRC64NVME": "z="}).algorithm == "crc32"
    assert expectation_for({**base, "ChecksumCRC64NVME": "z="}) == Expectation(3, "crc64nvme", "z=")
    assert expectation_for(base).algorithm == "md5"
    assert expectation_for(base, sha256_hex="ab").algorithm == "sha256"


def test_without_the_crt_a_crc64nvme_gives_way_to_the_etag(monkeypatch):
    # Given an agent that cannot compute a CRC-64/NVME (installed without awscrt)
    real = integrity.running_crc
    monkeypatch.setattr(
        integrity, "running_crc", lambda algorithm: None if algorithm == "crc64nvme" else real(algorithm)
    )

    # When / Then: the single-part ETag's MD5 is the check, not a CRC it could not compute
    response = {"ContentLength": 3, "ETag": '"' + "a" * 32 + '"', "ChecksumCRC64NVME": "z="}
    assert expectation_for(response).algorithm == "md5"


def test_expectation_falls_back_to_size_when_no_digest_is_trustworthy():
    # Given a multipart ETag, a composite checksum, and a KMS-encrypted object
    multipart = {"ContentLength": 3, "ETag": '"' + "a" * 32 + '-4"'}
    composite = {**multipart, "ChecksumSHA256": "abc=-4", "ChecksumType": "COMPOSITE"}
    kms = {"ContentLength": 3, "ETag": '"' + "a" * 32 + '"', "ServerSideEncryption": "aws:kms"}

    # When / Then
    assert expectation_for(multipart).algorithm == "size"
    assert expectation_for(composite).algorithm == "size"
    assert expectation_for(kms).algorithm == "size"


def test_a_prefix_is_staged_with_relative_paths_and_every_file_verified(tmp_path):
    # Given a prefix over two listing pages, with SHA-256, CRC32 and ETag-only objects and a folder marker
    s3 = FakeS3(page_size=2)
    s3.put("in/a.bin", b"alpha")
    s3.put("in/sub/b.bin", b"bravo" * 1000, checksum="crc32")
    s3.put("in/sub/c.bin", b"charlie", checksum="none")
    s3.put("in/sub/", b"", checksum="none")

    # When it is planned and staged
    items = plan_input(s3, f"s3://{BUCKET}/in/", tmp_path / "data")
    report = stage(s3, items, root=tmp_path, max_workers=4)

    # Then every file is in place, and nothing temporary is left
    assert report.files == 3
    assert report.bytes == 5 + 5000 + 7
    assert (tmp_path / "data" / "a.bin").read_bytes() == b"alpha"
    assert (tmp_path / "data" / "sub" / "b.bin").read_bytes() == b"bravo" * 1000
    assert (tmp_path / "data" / "sub" / "c.bin").read_bytes() == b"charlie"
    assert not list((tmp_path / "data").rglob(".*"))


def test_a_single_object_goes_to_its_file_or_into_an_existing_directory(tmp_path):
    # Given one object
    s3 = FakeS3()
    s3.put("in/one.csv", b"1,2")
    (tmp_path / "dir").mkdir()

    # When / Then
    assert (
        plan_input(s3, f"s3://{BUCKET}/in/one.csv", tmp_path / "x.csv")[0].destination == tmp_path / "x.csv"
    )
    assert (
        plan_input(s3, f"s3://{BUCKET}/in/one.csv", tmp_path / "dir")[0].destination
        == tmp_path / "dir" / "one.csv"
    )


def test_an_empty_prefix_is_an_error(tmp_path):
    # Given a prefix with no object (a typo, most likely)
    s3 = FakeS3()

    # When / Then
    with pytest.raises(StagingError, match="no object under"):
        plan_input(s3, f"s3://{BUCKET}/nothing/", tmp_path)


@pytest.mark.parametrize("checksum", ["sha256", "crc32", "none"])
def test_a_corrupted_read_is_retried_once_and_then_succeeds(tmp_path, checksum):
    # Given an object whose first read comes back corrupted
    s3 = FakeS3()
    s3.put("in/a.bin", b"payload-bytes", checksum=checksum)
    s3.corrupt_reads["in/a.bin"] = 1

    # When it is staged
    report = stage(s3, [StageItem(BUCKET, "in/a.bin", tmp_path / "a.bin")], root=tmp_path)

    # Then the second read was used
    assert report.files == 1
    assert s3.gets["in/a.bin"] == 2
    assert (tmp_path / "a.bin").read_bytes() == b"payload-bytes"


def test_an_object_corrupted_on_every_read_fails_staging_and_leaves_no_file(tmp_path):
    # Given an object that always comes back corrupted
    s3 = FakeS3()
    s3.put("in/a.bin", b"payload-bytes")
    s3.corrupt_reads["in/a.bin"] = 99

    # When / Then
    with pytest.raises(StagingError, match="SHA-256 differs"):
        stage(s3, [StageItem(BUCKET, "in/a.bin", tmp_path / "a.bin")], root=tmp_path)
    assert s3.gets["in/a.bin"] == 2
    assert list(tmp_path.iterdir()) == []


def test_a_short_body_fails_on_its_size(tmp_path):
    # Given an object whose body is always one byte short
    s3 = FakeS3()
    s3.put("in/a.bin", b"payload-bytes", checksum="none")
    s3.truncate_reads["in/a.bin"] = 99

    # When / Then
    with pytest.raises(StagingError, match="ContentLength"):
        stage(s3, [StageItem(BUCKET, "in/a.bin", tmp_path / "a.bin")], root=tmp_path)


def test_an_expected_sha256_is_checked_even_when_s3_agrees_with_the_bytes(tmp_path):
    # Given bytes that match S3's checksum but not the digest a commit marker recorded
    s3 = FakeS3()
    s3.put("ck/a.bin", b"overwritten later")
    item = StageItem(BUCKET, "ck/a.bin", tmp_path / "a.bin", sha256=hashlib.sha256(b"original").hexdigest())

    # When / Then
    with pytest.raises(StagingError, match="expected digest"):
        stage(s3, [item], root=tmp_path)


def test_two_items_with_one_destination_are_refused(tmp_path):
    # Given / When / Then
    items = [StageItem(BUCKET, "a", tmp_path / "x"), StageItem(BUCKET, "b", tmp_path / "x")]
    with pytest.raises(StagingError, match="same local file"):
        stage(FakeS3(), items, root=tmp_path)


def test_the_destination_keeps_its_old_content_until_the_new_file_is_verified(tmp_path: Path):
    # Given an existing file and an object that always fails verification
    target = tmp_path / "a.bin"
    target.write_bytes(b"old")
    s3 = FakeS3()
    s3.put("in/a.bin", b"new-content")
    s3.corrupt_reads["in/a.bin"] = 99

    # When staging fails
    with pytest.raises(StagingError):
        stage(s3, [StageItem(BUCKET, "in/a.bin", target)], root=tmp_path)

    # Then the old file was never half overwritten
    assert target.read_bytes() == b"old"

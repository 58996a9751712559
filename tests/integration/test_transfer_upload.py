"""Checkpoint upload against moto S3: one PUT or parallel parts sized to the file, each byte read once."""

from __future__ import annotations

import hashlib
import random
import zlib
from typing import Any

import pytest

from spotrun.agent import checkpoint_store
from spotrun.agent.transfer import upload
from spotrun.agent.transfer.ranges import MIB, ranges_of
from spotrun.model import layout
from tests.integration.conftest import AGENT_BUCKET as BUCKET

JOB = "j-000000000001"
SIZE = 16 * MIB + 777  # 8 MiB parts: three of them
BODY = random.Random(3).randbytes(SIZE)


class Recording:
    """An S3 client that records the multipart calls it passes on."""

    def __init__(self, inner: Any):
        self._inner = inner
        self.parts: list[tuple[str, int, int]] = []
        self.puts: list[str] = []

    def upload_part(self, **kwargs: Any) -> dict[str, Any]:
        self.parts.append((kwargs["Key"], kwargs["PartNumber"], len(kwargs["Body"])))
        return self._inner.upload_part(**kwargs)

    def put_object(self, **kwargs: Any) -> dict[str, Any]:
        self.puts.append(kwargs["Key"])
        return self._inner.put_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def a_checkpoint(tmp_path, step: int):
    directory = tmp_path / layout.checkpoint_name(step)
    directory.mkdir(parents=True)
    (directory / "weights.bin").write_bytes(BODY)
    (directory / "meta.json").write_text(f'{{"step": {step}}}')
    return directory


def test_a_large_checkpoint_file_is_a_multipart_upload_and_its_marker_sha256_matches(s3, tmp_path):
    # Given a checkpoint of one 16 MiB file and one small file
    client = Recording(s3)
    directory = a_checkpoint(tmp_path / "local", 100)

    # When it is uploaded
    checkpoint_store.upload_checkpoint(client, BUCKET, JOB, 100, directory, attempt=1)

    # Then the large file went as three parts of the expected sizes, the small one (and the marker) as one PUT
    prefix = layout.checkpoint_prefix(JOB, 100)
    assert sorted(p for p in client.parts if p[0] == prefix + "weights.bin") == [
        (prefix + "weights.bin", n, length) for n, (_, length) in enumerate(ranges_of(SIZE), start=1)
    ]
    assert len(client.parts) == 3
    assert sorted(client.puts) == [prefix + "_COMMITTED.json", prefix + "meta.json"]
    # and the marker lists the file's SHA-256, S3 keeps a full-object CRC-32 of it
    marker = checkpoint_store.read_marker(s3, BUCKET, JOB, 100)
    listed = {f.path: f.sha256 for f in marker.files}
    assert listed["weights.bin"] == hashlib.sha256(BODY).hexdigest()
    head = s3.head_object(Bucket=BUCKET, Key=prefix + "weights.bin", ChecksumMode="ENABLED")
    assert head["ChecksumType"] == "FULL_OBJECT"
    assert head["ChecksumCRC32"] == upload._b64(zlib.crc32(BODY).to_bytes(4, "big"))
    small = s3.head_object(Bucket=BUCKET, Key=prefix + "meta.json", ChecksumMode="ENABLED")
    assert small["ChecksumCRC32"] == upload._b64(zlib.crc32(b'{"step": 100}').to_bytes(4, "big"))
    assert listed["meta.json"] == hashlib.sha256(b'{"step": 100}').hexdigest()

    # and the checkpoint restores, verified, with ranged GETs
    restored = checkpoint_store.download_checkpoint(s3, BUCKET, JOB, 100, tmp_path / "restore")
    assert (restored.path / "weights.bin").read_bytes() == BODY


@pytest.mark.parametrize("size", [SIZE, MIB], ids=["multipart", "one-put"])
def test_each_byte_of_an_upload_is_read_once_and_hashed_once(s3, tmp_path, monkeypatch, size):
    # Given reads, SHA-256 and CRC-32 in the upload that count the bytes they see (botocore computes nothing
    # of its own when it is given the checksum; its CRC-32, the CRT's, is not counted here)
    seen = {"read": 0, "sha256": 0, "crc32": 0}
    real_open, real_sha256, real_crc32 = upload.open_regular, hashlib.sha256, zlib.crc32

    class CountingHandle:
        def __init__(self, inner: Any):
            self._inner = inner

        def read(self, size: int = -1) -> bytes:
            data = self._inner.read(size)
            seen["read"] += len(data)
            return bytes(data)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    class CountingOpen:
        def __init__(self, path: Any):
            self._context = real_open(path)

        def __enter__(self) -> CountingHandle:
            return CountingHandle(self._context.__enter__())

        def __exit__(self, *exc: Any) -> None:
            self._context.__exit__(*exc)

    class CountingSha256:
        def __init__(self, data: bytes = b""):
            self._inner = real_sha256()
            self.update(data)

        def update(self, data: bytes) -> None:
            seen["sha256"] += len(data)
            self._inner.update(data)

        def digest(self) -> bytes:
            return self._inner.digest()

        def hexdigest(self) -> str:
            return self._inner.hexdigest()

    def counting_crc32(data: bytes, value: int = 0) -> int:
        seen["crc32"] += len(data)
        return real_crc32(data, value)

    monkeypatch.setattr(upload, "open_regular", CountingOpen)
    monkeypatch.setattr(upload.hashlib, "sha256", CountingSha256)
    monkeypatch.setattr(upload, "crc32", counting_crc32)
    path = tmp_path / "weights.bin"
    path.write_bytes(BODY[:size])

    # When the file is uploaded
    uploaded = upload.upload_file(s3, path, BUCKET, "out/weights.bin")

    # Then it was read once, and that read went once through the SHA-256 and once through the CRC-32
    assert uploaded == (size, real_sha256(BODY[:size]).hexdigest())
    assert seen == {"read": size, "sha256": size, "crc32": size}
    # and S3 keeps that CRC-32 as the object's full-object checksum
    head = s3.head_object(Bucket=BUCKET, Key="out/weights.bin", ChecksumMode="ENABLED")
    assert head["ChecksumCRC32"] == upload._b64(real_crc32(BODY[:size]).to_bytes(4, "big"))


def test_a_file_that_grows_during_its_upload_is_refused_and_the_upload_aborted(s3, tmp_path, monkeypatch):
    # Given a large file that grows once its upload has started reading it
    path = tmp_path / "weights.bin"
    path.write_bytes(BODY)
    real_open = upload.open_regular

    class GrowingHandle:
        def __init__(self, inner: Any):
            self._inner = inner

        def read(self, size: int = -1) -> bytes:
            with path.open("ab") as grow:
                grow.write(b"more")
            return bytes(self._inner.read(size))

        def __getattr__(self, name: str) -> Any:
            return getattr(self._inner, name)

    class Growing:
        def __init__(self, target: Any):
            self._context = real_open(target)

        def __enter__(self) -> GrowingHandle:
            return GrowingHandle(self._context.__enter__())

        def __exit__(self, *exc: Any) -> None:
            self._context.__exit__(*exc)

    monkeypatch.setattr(upload, "open_regular", Growing)

    # When / Then: refused, and no upload left open nor object written
    with pytest.raises(upload.FileChangedError):
        upload.upload_file(s3, path, BUCKET, "out/weights.bin")
    assert s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix="out/")

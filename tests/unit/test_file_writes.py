"""Staging writes what it receives 64 KiB per system call, every byte, whichever way the body came."""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from spotrun.agent.transfer import download, file_writes
from spotrun.agent.transfer.download import StageItem
from spotrun.agent.transfer.file_writes import WRITE_BYTES, write_at
from spotrun.agent.transfer.ranges import MIB
from tests.unit.test_staging import BUCKET, FakeS3


def test_write_at_writes_every_byte_in_place_64_kib_at_a_time(tmp_path, pwrites):
    # Given a file of zeros and 300 KiB to write into its middle
    path = tmp_path / "f"
    path.write_bytes(bytes(400 * 1024))
    data = random.Random(1).randbytes(300 * 1024)
    descriptor = os.open(path, os.O_WRONLY)

    # When it is written at offset 1,000
    try:
        written = write_at(descriptor, data, 1000)
    finally:
        os.close(descriptor)

    # Then all of it landed there, in five writes of at most 64 KiB
    assert written == len(data)
    assert path.read_bytes() == bytes(1000) + data + bytes(400 * 1024 - 1000 - len(data))
    assert pwrites == [WRITE_BYTES] * 4 + [len(data) - 4 * WRITE_BYTES]


def test_write_at_carries_on_after_a_short_write_and_refuses_a_write_of_nothing(tmp_path, monkeypatch):
    # Given a pwrite that writes at most 1,000 bytes per call (as a nearly full disk may)
    real_pwrite = os.pwrite
    monkeypatch.setattr(
        os, "pwrite", lambda fd, data, position: real_pwrite(fd, bytes(data[:1000]), position)
    )
    path = tmp_path / "f"
    data = random.Random(2).randbytes(10_500)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        # When 10,500 bytes are written / Then every one of them is in the file
        assert write_at(descriptor, data, 0) == len(data)
        assert path.read_bytes() == data

        # Given a pwrite that writes nothing / When / Then an error, not an endless loop or a silent gap
        calls: list[int] = []

        def nothing(fd: int, data: bytes, position: int) -> int:
            calls.append(position)
            assert len(calls) < 10, "write_at kept calling a pwrite that writes nothing"
            return 0

        monkeypatch.setattr(os, "pwrite", nothing)
        with pytest.raises(OSError, match="wrote nothing"):
            write_at(descriptor, b"x", 0)
    finally:
        os.close(descriptor)


@pytest.mark.parametrize(("size", "ranged"), [(MIB + 7, False), (24 * MIB + 5, True)])
def test_staging_writes_its_files_64_kib_at_a_time(tmp_path: Path, pwrites, size, ranged):
    # Given an object under the ranged threshold (one GET through boto3) and one over it (ranged GETs)
    body = random.Random(size).randbytes(size)
    s3 = FakeS3()
    s3.put("in/data.bin", body, checksum="crc32")
    item = StageItem(BUCKET, "in/data.bin", tmp_path / "data.bin", size=size)

    # When it is staged
    with ThreadPoolExecutor(max_workers=4) as pool:
        staged = download.download_verified(s3, item, root=tmp_path, ranged_pool=pool)

    # Then the file is the object, written by pwrite in pieces of at most 64 KiB that add up to it
    assert (tmp_path / "data.bin").read_bytes() == body
    assert (staged.requests > 1) is ranged
    assert max(pwrites) <= file_writes.WRITE_BYTES
    assert sum(pwrites) == size

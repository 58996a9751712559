"""Large objects staged as parallel ranged GETs, each byte hashed once, and CRC-32s combined across ranges."""

from __future__ import annotations

import random
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spotrun.agent.transfer import download, integrity, ranges
from spotrun.agent.transfer.crcs import crc32_combine
from spotrun.agent.transfer.download import StageItem, StagingError, stage
from spotrun.agent.transfer.ranges import MIB, ranges_of
from tests.unit.test_staging import BUCKET, FakeS3

SIZE = 24 * MIB + 12345  # 8 MiB ranges: 3 full ones and a short last one
BODY = random.Random(7).randbytes(SIZE)


@given(a=st.binary(max_size=300), b=st.binary(max_size=300))
def test_crc32_combine_is_the_crc_of_the_concatenation(a, b):
    # Given two byte strings / When their CRCs are combined / Then it is the CRC of both in a row
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


@pytest.mark.parametrize(
    ("checksum", "algorithm"), [("sha256", "sha256"), ("crc32", "crc32"), ("none", "md5")]
)
def test_a_large_object_is_fetched_as_ranged_gets_written_in_place_and_verified(
    tmp_path, checksum, algorithm
):
    # Given a 24 MiB object, listed with its size
    s3 = FakeS3()
    s3.put("in/big.bin", BODY, checksum=checksum)
    item = StageItem(BUCKET, "in/big.bin", tmp_path / "big.bin", size=SIZE)

    # When it is staged
    with ThreadPoolExecutor(max_workers=4) as pool:
        staged = download.download_verified(s3, item, root=tmp_path, ranged_pool=pool)

    # Then four ranged GETs covered it exactly, once each, and the file is the object, checked by its digest
    assert sorted(s3.ranges["in/big.bin"]) == [(o, o + n - 1) for o, n in ranges_of(SIZE)]
    assert len(s3.ranges["in/big.bin"]) == 4
    assert staged.requests == 4
    assert staged.algorithm == algorithm
    assert (tmp_path / "big.bin").read_bytes() == BODY


def test_the_ranges_of_a_staging_are_sized_to_all_its_large_objects(tmp_path):
    # Given two large objects, staged over two streams
    s3 = FakeS3()
    items = []
    for name in ("a", "b"):
        s3.put(f"in/{name}.bin", BODY)
        items.append(StageItem(BUCKET, f"in/{name}.bin", tmp_path / f"{name}.bin", size=SIZE))

    # When they are staged
    stage(s3, items, root=tmp_path, max_workers=2)

    # Then each is fetched in two ranges per stream over both (13 MiB), not in 8 MiB parts of its own
    part = ranges.range_size(2 * SIZE, 2)
    assert part == 13 * MIB
    for name in ("a", "b"):
        assert sorted(s3.ranges[f"in/{name}.bin"]) == [(o, o + n - 1) for o, n in ranges_of(SIZE, part)]
        assert (tmp_path / f"{name}.bin").read_bytes() == BODY


def test_ranged_gets_in_flight_are_at_most_four_per_cpu(tmp_path, monkeypatch):
    # Given a process that may run on one CPU, and the pools staging makes, recorded
    monkeypatch.setattr(ranges, "usable_cpus", lambda: 1)
    made: dict[str, int] = {}
    real_pool = download.ThreadPoolExecutor

    def recorded_pool(max_workers: int, thread_name_prefix: str) -> Any:
        made[thread_name_prefix] = max_workers
        return real_pool(max_workers=max_workers, thread_name_prefix=thread_name_prefix)

    monkeypatch.setattr(download, "ThreadPoolExecutor", recorded_pool)
    s3 = FakeS3()
    s3.put("in/big.bin", BODY)

    # When a large object is staged with 32 workers
    stage(
        s3, [StageItem(BUCKET, "in/big.bin", tmp_path / "big.bin", size=SIZE)], root=tmp_path, max_workers=32
    )

    # Then files get 32 workers and ranges 4 streams
    assert made == {"stage": 32, "stage-range": 4}
    assert (tmp_path / "big.bin").read_bytes() == BODY


def test_a_corrupted_range_fails_verification_and_the_file_is_fetched_once_more(tmp_path):
    # Given a large object whose first GET (a range) comes back corrupted
    s3 = FakeS3()
    s3.put("in/big.bin", BODY)
    s3.corrupt_reads["in/big.bin"] = 1

    # When it is staged
    report = stage(s3, [StageItem(BUCKET, "in/big.bin", tmp_path / "big.bin", size=SIZE)], root=tmp_path)

    # Then the second attempt fetched every range again, and the file is right
    assert report.bytes == SIZE
    assert len(s3.ranges["in/big.bin"]) == 8
    assert (tmp_path / "big.bin").read_bytes() == BODY


def test_a_large_object_corrupted_on_every_attempt_fails_and_leaves_no_file(tmp_path):
    # Given a large object with one corrupted range in each attempt
    s3 = FakeS3()
    s3.put("in/big.bin", BODY, checksum="crc32")
    s3.corrupt_reads["in/big.bin"] = 99

    # When / Then
    with pytest.raises(StagingError, match="CRC32 differs"):
        stage(s3, [StageItem(BUCKET, "in/big.bin", tmp_path / "big.bin", size=SIZE)], root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_an_expected_sha256_is_checked_on_a_ranged_download(tmp_path):
    # Given a large object whose bytes are not those a commit marker recorded
    s3 = FakeS3()
    s3.put("ck/big.bin", BODY)
    item = StageItem(BUCKET, "ck/big.bin", tmp_path / "big.bin", sha256="0" * 64, size=SIZE)

    # When / Then
    with pytest.raises(StagingError, match="expected digest"):
        stage(s3, [item], root=tmp_path)


class CountingHash:
    """A hashlib object counting the bytes it is fed."""

    fed = 0

    def __init__(self, inner: Any):
        self._inner = inner

    def update(self, data: bytes) -> None:
        CountingHash.fed += len(data)
        self._inner.update(data)

    def digest(self) -> bytes:
        return bytes(self._inner.digest())


@pytest.mark.parametrize("checksum", ["sha256", "crc32"])
def test_each_byte_of_a_ranged_download_is_hashed_once(tmp_path, monkeypatch, crc_calls, checksum):
    # Given hashing and CRCs that count the bytes they see
    real_new_hash = integrity.new_hash
    CountingHash.fed = 0

    def counted_new_hash(algorithm: Any) -> Any:
        inner = real_new_hash(algorithm)
        return None if inner is None else CountingHash(inner)

    monkeypatch.setattr(integrity, "new_hash", counted_new_hash)
    monkeypatch.setattr(download, "new_hash", counted_new_hash)
    s3 = FakeS3()
    s3.put("in/big.bin", BODY, checksum=checksum)

    # When a large object is staged
    stage(s3, [StageItem(BUCKET, "in/big.bin", tmp_path / "big.bin", size=SIZE)], root=tmp_path)

    # Then its bytes went through the check's digest exactly once
    assert CountingHash.fed + sum(size for _, size in crc_calls) == SIZE


def test_an_object_of_unknown_size_is_sized_by_head_and_small_ones_are_one_get(tmp_path):
    # Given a small object and a large one, neither listed
    s3 = FakeS3()
    s3.put("in/small.bin", b"small")
    s3.put("in/big.bin", BODY)

    # When both are staged
    stage(
        s3,
        [StageItem(BUCKET, "in/small.bin", tmp_path / "s"), StageItem(BUCKET, "in/big.bin", tmp_path / "b")],
        root=tmp_path,
    )

    # Then the small one was one GET without a range, the large one ranges
    assert s3.gets["in/small.bin"] == 1
    assert "in/small.bin" not in s3.ranges
    assert len(s3.ranges["in/big.bin"]) == 4
    assert (tmp_path / "b").read_bytes() == BODY


class _ReadSizes(FakeS3):
    """A FakeS3 whose bodies record the size of every read staging asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        response = super().get_object(**kwargs)
        body, asked = response["Body"], self.asked

        class Recording:
            def read(self, amount: int = -1) -> bytes:
                asked.append(amount)
                return bytes(body.read(amount))

            def close(self) -> None:
                body.close()

        response["Body"] = Recording()
        return response


def test_bodies_are_read_in_pieces_of_2_mib(tmp_path):
    # Given a large object (ranged GETs) and a small one (one GET)
    s3 = _ReadSizes()
    s3.put("in/big.bin", BODY, checksum="crc32")
    s3.put("in/small.bin", BODY[: 3 * MIB])
    items = [
        StageItem(BUCKET, "in/big.bin", tmp_path / "big.bin", size=SIZE),
        StageItem(BUCKET, "in/small.bin", tmp_path / "small.bin", size=3 * MIB),
    ]

    # When both are staged
    stage(s3, items, root=tmp_path, max_workers=4)

    # Then every read asked for 2 MiB (fewer calls through botocore: docs/development/transfers.md, "Staging")
    assert set(s3.asked) == {2 * MIB}
    assert (tmp_path / "big.bin").read_bytes() == BODY

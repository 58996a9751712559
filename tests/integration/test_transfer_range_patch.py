"""The emulator's ranged GETs (spotrun.local.patches.s3_ranges): the right bytes, moto's answers kept, no whole read."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from moto import mock_aws

from spotrun.agent.transfer.file_writes import WRITE_BYTES
from spotrun.local.patches import s3_ranges
from spotrun.local.patches.reversible import PatchSet

BUCKET = "range-bucket"
SMALL = random.Random(1).randbytes(3000)  # stays in the key's memory buffer
LARGE = random.Random(2).randbytes(6 * 1024 * 1024)  # past moto's 5 MiB buffer: a real temporary file


@pytest.fixture(scope="module")
def patched_s3() -> Iterator[Any]:
    """A moto S3 (in process) holding SMALL and LARGE, with the range patch installed."""
    saved = {name: os.environ.get(name) for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    patches = PatchSet()
    try:
        with mock_aws():
            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket=BUCKET)
            client.put_object(Bucket=BUCKET, Key="small", Body=SMALL)
            client.put_object(Bucket=BUCKET, Key="large", Body=LARGE)
            s3_ranges.install(patches)
            yield client, patches
    finally:
        patches.undo_all()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def expected_slice(body: bytes, first: int | None, last: int | None) -> bytes:
    """The bytes RFC 9110 section 14.1.2 selects for ``bytes=first-last`` (``first`` None: a suffix)."""
    if first is None:
        assert last is not None
        return body[-last:] if last else b""
    return body[first : (len(body) if last is None else last + 1)]


def spec(first: int | None, last: int | None) -> str:
    return f"bytes={'' if first is None else first}-{'' if last is None else last}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key=st.sampled_from(["small", "large"]),
    first=st.integers(min_value=0, max_value=len(LARGE) - 1),
    length=st.integers(min_value=1, max_value=len(LARGE)),
    suffix=st.booleans(),
)
def test_a_ranged_get_returns_the_bytes_of_the_range(patched_s3, key, first, length, suffix):
    client, _ = patched_s3
    # Given an object and a satisfiable range of it (first-last or a suffix, past the end allowed)
    body = SMALL if key == "small" else LARGE
    first = first % len(body)
    if suffix:
        start, end = None, length
    else:
        start, end = first, first + length - 1

    # When it is fetched
    response = client.get_object(Bucket=BUCKET, Key=key, Range=spec(start, end))

    # Then the body is that range, announced by Content-Range, with status 206
    data = response["Body"].read()
    assert data == expected_slice(body, start, end)
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 206
    begin = len(body) - len(data) if suffix else first
    assert response["ContentRange"] == f"bytes {begin}-{begin + len(data) - 1}/{len(body)}"


@pytest.mark.parametrize("header", ["bytes=6291456-", "bytes=-0", "bytes=0-1,5-9", "bytes=x-y", "bytes=9-3"])
def test_moto_s_answers_to_unusual_ranges_are_kept(patched_s3, header):
    client, patches = patched_s3

    def answer() -> tuple[int, bytes | str]:
        try:
            response = client.get_object(Bucket=BUCKET, Key="large", Range=header)
        except ClientError as exc:
            return exc.response["ResponseMetadata"]["HTTPStatusCode"], exc.response["Error"]["Code"]
        return response["ResponseMetadata"]["HTTPStatusCode"], response["Body"].read()

    # Given the answer of the unpatched emulator to an unsatisfiable, multiple, unparsable or reversed range
    patches.undo_all()
    try:
        before = answer()
    finally:
        s3_ranges.install(patches)

    # When the patched emulator answers it / Then it answers the same
    assert answer() == before


class CountingBuffer:
    """A key's value buffer that counts the bytes read from it (by read() or by os.pread on its file)."""

    def __init__(self, inner: Any, counter: list[int]):
        self._inner = inner
        self._counter = counter

    def read(self, *args: Any) -> bytes:
        data = self._inner.read(*args)
        self._counter[0] += len(data)
        return bytes(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_ranged_get_reads_only_its_range_from_the_object(patched_s3, monkeypatch):
    # Given the large object's buffer, counting what is read of it (its ETag already known)
    client, _ = patched_s3
    from moto.s3.models import s3_backends

    key = s3_backends["123456789012"]["aws"].get_object(BUCKET, "large")
    assert key.etag
    counter = [0]
    monkeypatch.setattr(key, "_value_buffer", CountingBuffer(key._value_buffer, counter))
    real_pread = os.pread

    def counting_pread(fd: int, length: int, offset: int) -> bytes:
        data = real_pread(fd, length, offset)
        counter[0] += len(data)
        return data

    monkeypatch.setattr(os, "pread", counting_pread)

    # When 1 KiB of it is fetched
    data = client.get_object(Bucket=BUCKET, Key="large", Range="bytes=4096-5119")["Body"].read()

    # Then only that KiB was read, not the 6 MiB object
    assert data == LARGE[4096:5120]
    assert counter[0] == 1024


def test_an_object_past_moto_s_memory_buffer_is_stored_64_kib_at_a_time(patched_s3, monkeypatch):
    # Given every write into a key's buffer recorded
    client, _ = patched_s3
    import tempfile

    sizes: list[int] = []
    real_write = tempfile.SpooledTemporaryFile.write

    def write(self: Any, data: Any) -> int:
        sizes.append(len(data))
        return real_write(self, data)

    monkeypatch.setattr(tempfile.SpooledTemporaryFile, "write", write)
    body = random.Random(3).randbytes(6 * 1024 * 1024 + 11)

    # When an object of 6 MiB and 11 bytes is put, then one of 3,000 bytes
    client.put_object(Bucket=BUCKET, Key="stored", Body=body)
    big = list(sizes)
    client.put_object(Bucket=BUCKET, Key="stored-small", Body=SMALL)

    # Then the large one went into its file 64 KiB at a time, the small one in one write, and both read back whole
    assert max(big) == WRITE_BYTES
    assert sum(big) == len(body)
    assert sizes[len(big) :] == [len(SMALL)]
    assert client.get_object(Bucket=BUCKET, Key="stored")["Body"].read() == body
    assert client.get_object(Bucket=BUCKET, Key="stored-small")["Body"].read() == SMALL

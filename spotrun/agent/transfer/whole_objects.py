"""One GET per object, into a temporary file that is checked and then renamed: staging's small objects.

Two ways to make that GET, verified alike (:mod:`spotrun.agent.transfer.download` chooses; it ranges large objects):

- :func:`download_whole`: through the boto3 client, the body read and hashed 2 MiB at a time and written in
  64 KiB pieces (:mod:`.file_writes`; one hashing pass: botocore's running checksum is the digest checked when
  it is of the algorithm needed);
- :func:`download_direct`: through a :class:`DirectGetter` (the CRT's S3 client, :mod:`.crt_gets`), which
  writes the body into the file and returns the response's headers, S3's checksum among them, and the CRC-32 of
  what it wrote. The check is made here: against that CRC-32 when it is the object's checksum, else in one pass
  over the file from the page cache. The CRT's own validation would check S3's checksum only, never a commit
  marker's SHA-256, which this check puts first. The size is always checked.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from spotrun.agent.transfer.file_writes import write_at
from spotrun.agent.transfer.integrity import Expectation, StreamDigest, body_reader, expectation_for, problems
from spotrun.agent.transfer.plan import Algorithm, S3Reader, StageItem, VerificationError

# Bodies are read (and hashed) 2 MiB at a time, and written 64 KiB at a time (file_writes), so the read size only
# sets how many calls go through botocore and urllib3: 4 x 256 MiB ranged goes 1,016-1,049 MB/s with 2 MiB reads,
# 948-973 with 1 MiB, 829-846 with 256 KiB, and 856 with 4 MiB, whose buffers pass the allocator's mmap threshold
# (spotrun.agent.transfer.allocator) and are mapped and faulted in afresh for every read (paired runs; the rule:
# docs/development/transfers.md, "Staging"; `make bench BENCH_ARGS='--only transfers'` measures staging whole).
CHUNK_BYTES = 2 * 1024 * 1024


def partial_name(item: StageItem) -> Path:
    # A hidden name in the same directory: the final rename is atomic, and nothing reads a partial file. It is
    # created afresh (O_EXCL: never a link left in its place) and the rename replaces a link at the final name
    # rather than writing through it.
    return item.destination.parent / f".{item.destination.name}.{uuid.uuid4().hex}.part"


CREATE = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW


@contextmanager
def landing(item: StageItem) -> Iterator[int]:
    """A new temporary file for ``item``, open read-write: renamed into place if the block ends normally.

    If the block raises (a failed GET, a check that did not pass), the file is closed and removed, and
    nothing under the final name changes.
    """
    partial = partial_name(item)
    descriptor = os.open(partial, os.O_RDWR | CREATE, 0o600)
    try:
        yield descriptor
    except BaseException:
        os.close(descriptor)
        partial.unlink(missing_ok=True)
        raise
    os.close(descriptor)
    partial.replace(item.destination)


def raise_if_unverified(item: StageItem, found: list[str]) -> None:
    """Raise :class:`VerificationError` naming ``item`` and each of the check's findings, if there are any."""
    if found:
        raise VerificationError(f"s3://{item.bucket}/{item.key}: " + "; ".join(found))


@dataclass(frozen=True)
class Fetched:
    """What one download moved: bytes, the check made, and its GETs."""

    size: int
    algorithm: Algorithm
    requests: int


def download_whole(s3: S3Reader, item: StageItem) -> Fetched:
    """GET ``item`` through ``s3`` into a temporary file, hashed as it is read, then renamed into place.

    Raises
    ------
    VerificationError
        When the bytes do not pass the check (the temporary file is removed; nothing is renamed).
    """
    response = s3.get_object(Bucket=item.bucket, Key=item.key, ChecksumMode="ENABLED")
    expectation = expectation_for(response, item.sha256)
    body = response["Body"]
    read, shared = body_reader(body, expectation.algorithm)
    digest = StreamDigest(expectation, shared=shared)
    try:
        with landing(item) as descriptor:
            position = 0
            while chunk := read(CHUNK_BYTES):
                digest.update(chunk)
                position += write_at(descriptor, chunk, position)
            raise_if_unverified(item, digest.problems())
    finally:
        body.close()
    return Fetched(digest.size, expectation.algorithm, 1)


class Received(NamedTuple):
    """What a :class:`DirectGetter` wrote.

    Attributes
    ----------
    response
        The response's fields as boto3 names them in ``get_object``'s (``ContentLength``, ``ETag``,
        ``ChecksumCRC32``...): what :func:`spotrun.agent.transfer.integrity.expectation_for` reads.
    crc32
        The CRC-32 of the body as it was written, front to back; None when it was not asked for, the object
        carries no CRC-32, or the body did not arrive in order (the check then reads the file back).
    """

    response: dict[str, Any]
    crc32: int | None


class DirectGetter(Protocol):
    """Whole-object GETs into an open file (:mod:`.crt_gets`)."""

    def get_into(self, bucket: str, key: str, descriptor: int, *, crc32: bool = True) -> Received:
        """GET the object into the empty file at ``descriptor``; return its response and the body's CRC-32."""
        ...


def _read_back_problems(descriptor: int, expectation: Expectation) -> list[str]:
    """Hash the written file once, from the page cache."""
    digest = StreamDigest(expectation)
    offset = 0
    while chunk := os.pread(descriptor, CHUNK_BYTES, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.problems()


def download_direct(direct: DirectGetter, item: StageItem) -> Fetched:
    """GET ``item`` through ``direct`` into a temporary file, complete the check, then rename it into place.

    Raises
    ------
    VerificationError
        When the bytes do not pass the check (the temporary file is removed; nothing is renamed).
    """
    with landing(item) as descriptor:
        # A SHA-256 known in advance is the check (expectation_for), whatever else the object carries.
        received = direct.get_into(item.bucket, item.key, descriptor, crc32=item.sha256 is None)
        expectation = expectation_for(received.response, item.sha256)
        size = os.fstat(descriptor).st_size
        if expectation.algorithm == "size":
            found = problems(expectation, size, None)
        elif expectation.algorithm == "crc32" and received.crc32 is not None:
            found = problems(expectation, size, received.crc32)  # computed as it was written: no read-back
        else:
            found = _read_back_problems(descriptor, expectation)
        raise_if_unverified(item, found)
    return Fetched(size, expectation.algorithm, 1)

"""Parallel, verified copy of S3 objects to local disk (the instance's NVMe): the transfer engine.

Every file is written to a temporary name, checked, then renamed into place, so a file under its final name
is always complete and verified. The check is chosen by :func:`spotrun.agent.transfer.integrity.expectation_for` (a
SHA-256 known in advance, S3's full-object SHA-256 or CRC32, a single-part ETag's MD5, and always the size),
and computed in one pass over the bytes. A file that fails is fetched once more, then staging fails.

A small object is one GET (:mod:`spotrun.agent.transfer.whole_objects`: through the CRT's S3 client when the agent has
one, else through boto3). An object of :data:`RANGED_THRESHOLD` bytes or more is fetched as parallel ranged
GETs (:mod:`spotrun.agent.transfer.ranges`: S3 serves byte ranges of one object in parallel:
https://docs.aws.amazon.com/whitepapers/latest/s3-optimizing-performance-best-practices/use-byte-range-fetches.html),
each written in place (:func:`spotrun.agent.transfer.file_writes.write_at`: 64 KiB per ``pwrite``) into a file
preallocated to the object's size; every range asks for the ETag the ``HeadObject`` that chose the check saw
(``IfMatch``), so an object overwritten midway fails with 412 instead of mixing two versions. Ranges of every
large file share one pool, so a few large files still make ``max_workers`` streams (at most
:data:`~spotrun.agent.transfer.ranges.STREAMS_PER_CPU` per CPU).

Every file lands under a root directory the agent made (the job's directory, or its checkpoint directory), and
nothing is written through a symbolic link found there (:func:`spotrun.agent.links.real_directories`): a link
planted by an earlier run's training code fails the staging with a :class:`LinkStagingError` naming it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from spotrun.agent.links import LinkError, real_directories
from spotrun.agent.transfer.crcs import RunningCrc, running_crc
from spotrun.agent.transfer.file_writes import write_at
from spotrun.agent.transfer.integrity import Expectation, OrderedDigest, expectation_for, new_hash, problems
from spotrun.agent.transfer.plan import (
    Algorithm,
    LinkStagingError,
    S3Reader,
    StagedFile,
    StageItem,
    StagingError,
    StagingReport,
    VerificationError,
    iter_objects,
    plan_input,
    relative_destination,
)
from spotrun.agent.transfer.ranges import RANGED_THRESHOLD, range_size, ranged_streams, ranges_of
from spotrun.agent.transfer.whole_objects import (
    CHUNK_BYTES,
    DirectGetter,
    Fetched,
    download_direct,
    download_whole,
    landing,
    raise_if_unverified,
)

__all__ = [
    "CHUNK_BYTES",
    "DEFAULT_WORKERS",
    "RANGED_THRESHOLD",
    "Algorithm",
    "DirectGetter",
    "Expectation",
    "LinkStagingError",
    "S3Reader",
    "StageItem",
    "StagedFile",
    "StagingError",
    "StagingReport",
    "VerificationError",
    "download_verified",
    "expectation_for",
    "iter_objects",
    "plan_input",
    "relative_destination",
    "stage",
]

logger = logging.getLogger(__name__)

DEFAULT_WORKERS = 32  # files at once, and ranges at once: with 64 pooled connections (step_runner.aws_client)


def _prepare_directory(root: Path, item: StageItem) -> None:
    try:
        real_directories(root, item.destination.parent)
    except LinkError as exc:
        raise LinkStagingError(f"refusing to stage s3://{item.bucket}/{item.key}: {exc}") from None


def _fetch_range(
    s3: S3Reader,
    item: StageItem,
    etag: str,
    descriptor: int,
    offset: int,
    length: int,
    crc: RunningCrc | None,
) -> tuple[int, int]:
    """GET one range and write it in place; return the bytes written and their ``crc`` (0 without one)."""
    response = s3.get_object(
        Bucket=item.bucket, Key=item.key, Range=f"bytes={offset}-{offset + length - 1}", IfMatch=etag
    )
    body = response["Body"]
    written = 0
    value = 0
    try:
        while written < length and (chunk := body.read(CHUNK_BYTES)):
            if written + len(chunk) > length:
                raise VerificationError(f"s3://{item.bucket}/{item.key}: range at {offset} is too long")
            write_at(descriptor, chunk, offset + written)
            if crc is not None:
                value = crc.update(chunk, value)
            written += len(chunk)
    finally:
        body.close()
    return written, value


def _download_ranged(
    s3: S3Reader, item: StageItem, head: dict[str, Any], ranged_pool: ThreadPoolExecutor, part: int | None
) -> Fetched:
    expectation = expectation_for(head, item.sha256)
    size = expectation.size
    etag = str(head["ETag"])
    ranges = ranges_of(size, part)
    with landing(item) as descriptor:
        os.ftruncate(descriptor, size)  # preallocated: every range writes in place
        ordered = None
        if new_hash(expectation.algorithm) is not None:
            ordered = OrderedDigest(expectation.algorithm, descriptor, ranges)
        crc = running_crc(expectation.algorithm)

        def one(index: int) -> tuple[int, int]:
            offset, length = ranges[index]
            result = _fetch_range(s3, item, etag, descriptor, offset, length, crc)
            if ordered is not None and result[0] == length:
                ordered.landed(index)
            return result

        futures = [ranged_pool.submit(one, index) for index in range(len(ranges))]
        try:
            results = [future.result() for future in futures]
        except BaseException:
            for future in futures:
                future.cancel()
            for future in futures:  # no range may still write into the descriptor once it is closed
                if not future.cancelled():
                    future.exception()
            raise
        received = sum(written for written, _ in results)
        found = [
            f"range at {offset} has {written} bytes of {length}"
            for (offset, length), (written, _) in zip(ranges, results, strict=True)
            if written != length
        ]
        if not found:
            digest: bytes | int | None = None
            if ordered is not None:
                digest = ordered.digest()
            elif crc is not None:
                digest = 0
                for (_, length), (_, value) in zip(ranges, results, strict=True):
                    digest = crc.combine(digest, value, length)
            found = problems(expectation, received, digest)
        raise_if_unverified(item, found)
    return Fetched(received, expectation.algorithm, len(ranges))


def _download_once(
    s3: S3Reader,
    item: StageItem,
    root: Path,
    ranged_pool: ThreadPoolExecutor | None,
    part: int | None,
    direct: DirectGetter | None,
) -> Fetched:
    _prepare_directory(root, item)
    if ranged_pool is not None and (item.size is None or item.size >= RANGED_THRESHOLD):
        # HeadObject chooses the check (a ranged GET carries no full-object checksum) and, for an object whose
        # size was not listed, between one GET and ranges.
        head = s3.head_object(Bucket=item.bucket, Key=item.key, ChecksumMode="ENABLED")
        if int(head["ContentLength"]) >= RANGED_THRESHOLD:
            return _download_ranged(s3, item, head, ranged_pool, part)
    if direct is not None:
        return download_direct(direct, item)
    return download_whole(s3, item)


def download_verified(
    s3: S3Reader,
    item: StageItem,
    *,
    root: Path,
    attempts: int = 2,
    ranged_pool: ThreadPoolExecutor | None = None,
    part: int | None = None,
    direct: DirectGetter | None = None,
) -> StagedFile:
    """Copy one object to its destination, verified, retrying a failed copy.

    Parameters
    ----------
    s3
        The S3 client.
    item
        What to copy where.
    root
        The directory ``item.destination`` must lie under; no component between them may be a link.
    attempts
        Tries in all (2: a failure is retried once).
    ranged_pool
        Where the ranged GETs of a large object run. None: every object is one GET.
    part
        Bytes per ranged GET (:func:`~spotrun.agent.transfer.ranges.range_size`). None:
        :func:`~spotrun.agent.transfer.ranges.part_size` of the object.
    direct
        Makes the one GET of an object that is not fetched in ranges (the CRT, :mod:`.crt_gets`). None:
        ``s3`` makes it.

    Returns
    -------
    StagedFile
        The size copied, the check used, and the GETs of the last attempt.

    Raises
    ------
    StagingError
        When every attempt failed; the last cause is chained. :class:`LinkStagingError` at once, when the
        destination's directory passes through a link.
    """
    last: Exception | None = None
    for attempt in range(1, attempts + 1):
        try:
            result = _download_once(s3, item, root, ranged_pool, part, direct)
        except LinkStagingError:
            raise
        except Exception as exc:  # any failure of one copy (network, checksum, disk) is worth one more try
            last = exc
            logger.warning(
                "staging s3://%s/%s failed (attempt %d of %d): %s",
                item.bucket,
                item.key,
                attempt,
                attempts,
                exc,
            )
            continue
        return StagedFile(item, result.size, result.algorithm, attempt, result.requests)
    raise StagingError(f"could not stage s3://{item.bucket}/{item.key}: {last}") from last


def stage(
    s3: S3Reader,
    items: Iterable[StageItem],
    *,
    root: Path,
    max_workers: int = DEFAULT_WORKERS,
    attempts: int = 2,
    direct: DirectGetter | None = None,
) -> StagingReport:
    """Copy every item in parallel, each verified; large objects as parallel ranged GETs.

    Parameters
    ----------
    s3
        The S3 client; boto3 clients are thread-safe. Give it ``max_pool_connections >= 2 * max_workers``.
    items
        What to copy.
    root
        The directory every destination lies under (a job's directory): nothing is written through a link
        between it and a file.
    max_workers
        Files copied at once, and ranged GETs in flight at once, the latter at most 4 per CPU
        (:func:`~spotrun.agent.transfer.ranges.ranged_streams`; two pools: a file waiting for its ranges does not hold a
        range's place). The ranges are sized to the large objects listed
        (:func:`~spotrun.agent.transfer.ranges.range_size`).
    attempts
        Tries per file.
    direct
        Makes the GET of each object under :data:`RANGED_THRESHOLD` (:func:`.crt_gets.crt_getter`). None:
        ``s3`` makes every GET.

    Returns
    -------
    StagingReport
        Files, bytes and seconds.

    Raises
    ------
    StagingError
        On the first file that cannot be staged (the files not yet started are cancelled), or when two items
        have the same destination.
    """
    started = time.monotonic()
    items = list(items)
    destinations = [item.destination for item in items]
    if len(set(destinations)) != len(destinations):
        raise StagingError("two staged objects would be written to the same local file")
    total = 0
    workers = max(1, max_workers)
    streams = ranged_streams(workers)
    part = range_size(
        sum(i.size for i in items if i.size is not None and i.size >= RANGED_THRESHOLD), streams
    )
    with (
        ThreadPoolExecutor(max_workers=streams, thread_name_prefix="stage-range") as ranged_pool,
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stage") as pool,
    ):
        futures: list[Future[StagedFile]] = [
            pool.submit(
                download_verified,
                s3,
                item,
                root=root,
                attempts=attempts,
                ranged_pool=ranged_pool,
                part=part,
                direct=direct,
            )
            for item in items
        ]
        try:
            for future in as_completed(futures):
                total += future.result().size
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return StagingReport(files=len(items), bytes=total, seconds=time.monotonic() - started)

"""Parallel, verified copy of S3 objects to local disk (the instance's NVMe).

Every file is streamed to a temporary name, checked, then renamed into place, so a file under its final name
is always complete and verified. The check is the strongest one the object allows, in this order:

1. a SHA-256 known in advance (a checkpoint's commit marker lists one per file);
2. S3's full-object ``ChecksumSHA256`` (objects uploaded with ``ChecksumAlgorithm="SHA256"``);
3. S3's full-object ``ChecksumCRC32`` (what recent SDKs add by default);
4. the MD5 in a single-part ETag (not for SSE-KMS / SSE-C objects, whose ETag is not an MD5);

and always the size against ``ContentLength``. A file that fails is fetched once more, then staging fails.

Every file lands under a root directory the agent made (the job's directory, or its checkpoint directory), and
nothing is written through a symbolic link found there (:func:`spotrun.agent.links.real_directories`): a link
planted by an earlier run's training code fails the staging with a :class:`LinkStagingError` naming it.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal, Protocol

from spotrun.agent.links import LinkError, real_directories
from spotrun.model.manifest import split_s3_uri

logger = logging.getLogger(__name__)

CHUNK_BYTES = 1024 * 1024
DEFAULT_WORKERS = 16

Algorithm = Literal["sha256", "crc32", "md5", "size"]


class S3Reader(Protocol):
    """The part of a boto3 S3 client that staging uses."""

    def list_objects_v2(self, **kwargs: Any) -> dict[str, Any]: ...

    def get_object(self, **kwargs: Any) -> dict[str, Any]: ...


class StagingError(Exception):
    """Staging could not complete."""


class VerificationError(StagingError):
    """A downloaded file does not match what S3 says it should be."""


class LinkStagingError(StagingError):
    """A file would be written through a symbolic link (or out of its root): never retried."""


@dataclass(frozen=True)
class StageItem:
    """One object to copy.

    Parameters
    ----------
    bucket, key
        The object.
    destination
        The local file to create.
    sha256
        Expected SHA-256 (hex) known from elsewhere, checked in addition to what S3 reports.
    """

    bucket: str
    key: str
    destination: Path
    sha256: str | None = None


@dataclass(frozen=True)
class StagedFile:
    """A file copied and verified."""

    item: StageItem
    size: int
    algorithm: Algorithm
    attempts: int


@dataclass(frozen=True)
class StagingReport:
    """What a call of :func:`stage` did."""

    files: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class Expectation:
    """What a downloaded body must match: its size, and a digest when one is known."""

    size: int
    algorithm: Algorithm
    s3_value: str | None = None  # as S3 reports it: base64 for checksums, hex for an ETag's MD5
    sha256_hex: str | None = None


def iter_objects(s3: S3Reader, bucket: str, prefix: str) -> Iterator[tuple[str, int]]:
    """Yield ``(key, size)`` of every object under ``prefix``, following continuation tokens."""
    arguments: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    while True:
        page = s3.list_objects_v2(**arguments)
        for entry in page.get("Contents", []):
            yield entry["Key"], int(entry["Size"])
        if not page.get("IsTruncated"):
            return
        arguments["ContinuationToken"] = page["NextContinuationToken"]


def relative_destination(key: str, prefix: str, destination_dir: Path) -> Path:
    """Local path of ``key`` staged from ``prefix`` into ``destination_dir``, keeping its relative path.

    Parameters
    ----------
    key
        The object's key, which starts with ``prefix``.
    prefix
        The staged prefix (empty, or ending with ``/``).
    destination_dir
        The local directory the prefix maps to.

    Returns
    -------
    Path
        ``destination_dir / <key without prefix>``.

    Raises
    ------
    StagingError
        When the relative part would leave ``destination_dir`` (``..``) or is empty.
    """
    relative = PurePosixPath(key[len(prefix) :])
    if not relative.parts or relative.is_absolute() or any(part in ("..", ".") for part in relative.parts):
        raise StagingError(
            f"refusing to stage key {key!r}: its path under {prefix!r} is not a plain relative path"
        )
    return destination_dir.joinpath(*relative.parts)


def plan_input(s3: S3Reader, source: str, destination: Path) -> list[StageItem]:
    """List what staging ``source`` into ``destination`` copies.

    Parameters
    ----------
    s3
        The S3 client.
    source
        ``s3://bucket/prefix/`` (ends with ``/``: every object below it, relative paths kept, "folder" marker
        objects skipped) or ``s3://bucket/key`` (one object).
    destination
        For a prefix, the directory it maps to. For one object, the file to create, or a directory (existing,
        or the staging root itself) that receives the object under its own name.

    Returns
    -------
    list[StageItem]
        The files to copy.

    Raises
    ------
    StagingError
        When a prefix holds no object (almost always a typo in the manifest).
    """
    bucket, key = split_s3_uri(source)
    if key == "" or key.endswith("/"):
        items = [
            StageItem(bucket, object_key, relative_destination(object_key, key, destination))
            for object_key, _ in iter_objects(s3, bucket, key)
            if not object_key.endswith("/")
        ]
        if not items:
            raise StagingError(f"no object under {source}")
        return items
    if destination.is_dir():
        destination = destination / PurePosixPath(key).name
    return [StageItem(bucket, key, destination)]


def expectation_for(response: dict[str, Any], sha256_hex: str | None = None) -> Expectation:
    """Choose the check for a ``get_object`` response (pure: reads only the response's headers).

    Parameters
    ----------
    response
        The response of ``get_object(..., ChecksumMode="ENABLED")``.
    sha256_hex
        A SHA-256 known in advance, if any.

    Returns
    -------
    Expectation
        The strongest check available; ``algorithm="size"`` when only the size can be checked.
    """
    size = int(response["ContentLength"])
    # Multipart uploads get a checksum of checksums ("...-N"), which no single pass over the bytes reproduces.
    composite = response.get("ChecksumType") == "COMPOSITE"
    sha256 = response.get("ChecksumSHA256")
    if sha256 and not composite and "-" not in sha256:
        return Expectation(size, "sha256", sha256, sha256_hex)
    if sha256_hex:
        return Expectation(size, "sha256", None, sha256_hex)
    crc32 = response.get("ChecksumCRC32")
    if crc32 and not composite and "-" not in crc32:
        return Expectation(size, "crc32", crc32)
    etag = str(response.get("ETag", "")).strip('"')
    encrypted_with_key = response.get("ServerSideEncryption") == "aws:kms" or response.get(
        "SSECustomerAlgorithm"
    )
    if etag and "-" not in etag and len(etag) == 32 and not encrypted_with_key:
        return Expectation(size, "md5", etag.lower())
    return Expectation(size, "size")


class _Digest:
    """Computes the one digest an :class:`Expectation` needs, chunk by chunk."""

    def __init__(self, expectation: Expectation):
        self.expectation = expectation
        self.size = 0
        self._crc = 0
        self._hash: Any = None
        if expectation.algorithm == "sha256":
            self._hash = hashlib.sha256()
        elif expectation.algorithm == "md5":
            self._hash = hashlib.md5(usedforsecurity=False)

    def update(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self._hash is not None:
            self._hash.update(chunk)
        elif self.expectation.algorithm == "crc32":
            self._crc = zlib.crc32(chunk, self._crc)

    def problems(self) -> list[str]:
        expected = self.expectation
        found = []
        if self.size != expected.size:
            found.append(f"size {self.size} != ContentLength {expected.size}")
        if expected.algorithm == "sha256":
            digest = self._hash.digest()
            if expected.s3_value and base64.b64encode(digest).decode() != expected.s3_value:
                found.append("SHA-256 differs from the object's ChecksumSHA256")
            if expected.sha256_hex and digest.hex() != expected.sha256_hex.lower():
                found.append("SHA-256 differs from the expected digest")
        elif expected.algorithm == "crc32":
            value = base64.b64encode(self._crc.to_bytes(4, "big")).decode()
            if value != expected.s3_value:
                found.append("CRC32 differs from the object's ChecksumCRC32")
        elif expected.algorithm == "md5" and self._hash.hexdigest() != expected.s3_value:
            found.append("MD5 differs from the ETag")
        return found


def _prepare_directory(root: Path, item: StageItem) -> None:
    try:
        real_directories(root, item.destination.parent)
    except LinkError as exc:
        raise LinkStagingError(f"refusing to stage s3://{item.bucket}/{item.key}: {exc}") from None


def _download_once(s3: S3Reader, item: StageItem, root: Path) -> tuple[int, Algorithm]:
    _prepare_directory(root, item)
    response = s3.get_object(Bucket=item.bucket, Key=item.key, ChecksumMode="ENABLED")
    expectation = expectation_for(response, item.sha256)
    digest = _Digest(expectation)
    # A hidden name in the same directory: the final rename is atomic, and nothing reads a partial file. It is
    # created afresh (O_EXCL: never a link left in its place) and the rename replaces a link at the final name
    # rather than writing through it.
    partial = item.destination.parent / f".{item.destination.name}.{uuid.uuid4().hex}.part"
    body = response["Body"]
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(partial, flags, 0o600), "wb") as handle:
            while chunk := body.read(CHUNK_BYTES):
                digest.update(chunk)
                handle.write(chunk)
        problems = digest.problems()
        if problems:
            raise VerificationError(f"s3://{item.bucket}/{item.key}: " + "; ".join(problems))
        partial.replace(item.destination)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        body.close()
    return digest.size, expectation.algorithm


def download_verified(s3: S3Reader, item: StageItem, *, root: Path, attempts: int = 2) -> StagedFile:
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

    Returns
    -------
    StagedFile
        The size copied and the check used.

    Raises
    ------
    StagingError
        When every attempt failed; the last cause is chained. :class:`LinkStagingError` at once, when the
        destination's directory passes through a link.
    """
    last: Exception | None = None
    for attempt in range(1, attempts + 1):
        try:
            size, algorithm = _download_once(s3, item, root)
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
        return StagedFile(item, size, algorithm, attempt)
    raise StagingError(f"could not stage s3://{item.bucket}/{item.key}: {last}") from last


def stage(
    s3: S3Reader,
    items: Iterable[StageItem],
    *,
    root: Path,
    max_workers: int = DEFAULT_WORKERS,
    attempts: int = 2,
) -> StagingReport:
    """Copy every item in parallel, each verified.

    Parameters
    ----------
    s3
        The S3 client; boto3 clients are thread-safe. Give it ``max_pool_connections >= max_workers``.
    items
        What to copy.
    root
        The directory every destination lies under (a job's directory): nothing is written through a link
        between it and a file.
    max_workers
        Files copied at once.
    attempts
        Tries per file.

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
    with ThreadPoolExecutor(max_workers=max(1, max_workers), thread_name_prefix="stage") as pool:
        futures = [pool.submit(download_verified, s3, item, root=root, attempts=attempts) for item in items]
        try:
            for future in as_completed(futures):
                total += future.result().size
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return StagingReport(files=len(items), bytes=total, seconds=time.monotonic() - started)

"""Upload of one local file to S3 at the ceiling: one PUT for a small file, parallel parts for a large one.

Every byte is read from disk once, and that read feeds both digests the upload needs: the file's SHA-256 (what
a commit marker or an output list records) and the checksum S3 checks on arrival, given to the SDK so that it
does not read the bytes again to compute its own
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html):

- a file under :data:`MULTIPART_THRESHOLD` is one ``PutObject`` with its CRC-32 (``ChecksumCRC32``), which S3
  keeps as the object's full-object checksum, so staging can verify the object without the marker, and as it
  receives it. A CRC-32 rather than the SHA-256 already computed: S3's check, staging's check (a CRC-32 is a
  hundredth of a SHA-256's CPU with ISA-L) and the emulator's, which shares the agent's cores, all cost less,
  for the same protection against a damaged transfer (docs/development/transfers.md, "Upload");
- a larger one is a multipart upload of parts sized by :func:`spotrun.agent.transfer.ranges.part_size` (8-64 MiB, about
  16 parts), sent in parallel, each with its CRC-32 (``ChecksumCRC32``) in an upload of checksum type
  ``FULL_OBJECT``: S3 checks each part, then the whole object's CRC-32, which is combined from the parts' here
  (:func:`spotrun.agent.transfer.crcs.crc32_combine`) and given at completion. The object then carries a
  full-object CRC-32 that staging verifies from its ranges. A failed upload is aborted (no parts left billed).

The file is read front to back by one thread (the SHA-256 is sequential); only the sending is parallel, with at
most ``max_in_flight`` parts in memory. The parts of at most :data:`LARGE_FILES_AT_ONCE` files share the senders
at a time: the same parts are in flight as with every file at once, but each upload completes as soon as its own
parts are sent instead of all of them together at the end.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from spotrun.agent.links import open_regular
from spotrun.agent.transfer.crcs import crc32, crc32_combine
from spotrun.agent.transfer.ranges import RANGED_THRESHOLD, ranges_of

logger = logging.getLogger(__name__)

MULTIPART_THRESHOLD = RANGED_THRESHOLD  # the size at which staging switches to ranges, for the same reason
DEFAULT_PART_WORKERS = 16
# Multipart uploads open at once. One leaves the senders idle while a file completes and the next one's first part
# is read; more than two hold more uploads half-done without sending more parts (the senders are shared). In the
# emulator, 4 x 256 MiB went at 80-90 MB/s with every file at once, 130-135 one at a time and 150 two at a time:
# moto keeps each open upload's parts and copies them at completion (docs/development/transfers.md).
LARGE_FILES_AT_ONCE = 2


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


class FileChangedError(RuntimeError):
    """A file changed size while it was being uploaded."""


class PartUploader:
    """The threads that send the parts of large files, shared by every file of one upload (a checkpoint).

    Parameters
    ----------
    max_workers
        Parts sent at once.
    max_in_flight
        Parts read and not yet sent, across every file: bounds the memory to ``max_in_flight * part size``.
    max_files
        Multipart uploads open at once (``file_slot``, which :func:`upload_file` holds around one); the other
        large files wait for one to complete.
    """

    def __init__(
        self,
        max_workers: int = DEFAULT_PART_WORKERS,
        max_in_flight: int | None = None,
        max_files: int = LARGE_FILES_AT_ONCE,
    ):
        self._pool = ThreadPoolExecutor(max_workers=max(1, max_workers), thread_name_prefix="upload-part")
        self._slots = threading.BoundedSemaphore(max_in_flight or max(1, max_workers) + 2)
        self.file_slot = threading.BoundedSemaphore(max(1, max_files))

    def __enter__(self) -> PartUploader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Wait for the parts being sent and stop the threads."""
        self._pool.shutdown(wait=True)

    def send(self, s3: Any, arguments: dict[str, Any]) -> Future[dict[str, Any]]:
        """Send one part (``upload_part(**arguments)``) once a slot is free; its body is released after."""
        self._slots.acquire()

        def run() -> dict[str, Any]:
            try:
                response = s3.upload_part(**arguments)
            finally:
                arguments.pop("Body", None)
                self._slots.release()
            return {
                "PartNumber": arguments["PartNumber"],
                "ETag": response["ETag"],
                "ChecksumCRC32": arguments["ChecksumCRC32"],
            }

        try:
            return self._pool.submit(run)
        except BaseException:
            self._slots.release()
            raise


def _put_small(s3: Any, handle: BinaryIO, size: int, bucket: str, key: str, extra: dict[str, str]) -> str:
    data = handle.read(size + 1)
    if len(data) != size:
        raise FileChangedError(f"{key}: the file changed size during its upload")
    # ChecksumAlgorithm names it (x-amz-sdk-checksum-algorithm); the value given is not computed again.
    s3.put_object(
        Bucket=bucket,
        Key=key,
        Body=data,
        ChecksumAlgorithm="CRC32",
        ChecksumCRC32=_b64(crc32(data).to_bytes(4, "big")),
        **extra,
    )
    return hashlib.sha256(data).hexdigest()


def _put_multipart(
    s3: Any, handle: BinaryIO, size: int, bucket: str, key: str, extra: dict[str, str], parts: PartUploader
) -> str:
    upload_id = s3.create_multipart_upload(
        Bucket=bucket, Key=key, ChecksumAlgorithm="CRC32", ChecksumType="FULL_OBJECT", **extra
    )["UploadId"]
    sha256 = hashlib.sha256()
    crc = 0
    futures: list[Future[dict[str, Any]]] = []
    try:
        for number, (_, length) in enumerate(ranges_of(size), start=1):
            data = handle.read(length)
            if len(data) != length:
                raise FileChangedError(f"{key}: the file changed size during its upload")
            sha256.update(data)
            part_crc = crc32(data)
            crc = crc32_combine(crc, part_crc, length)
            arguments = {
                "Bucket": bucket,
                "Key": key,
                "UploadId": upload_id,
                "PartNumber": number,
                "Body": data,
                "ChecksumCRC32": _b64(part_crc.to_bytes(4, "big")),
            }
            del data
            futures.append(parts.send(s3, arguments))
        if handle.read(1):
            raise FileChangedError(f"{key}: the file changed size during its upload")
        completed = [future.result() for future in futures]
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key=key,
            UploadId=upload_id,
            MultipartUpload={"Parts": completed},
            ChecksumCRC32=_b64(crc.to_bytes(4, "big")),
            ChecksumType="FULL_OBJECT",
        )
    except BaseException:
        for future in futures:
            future.cancel()
        for future in futures:
            if not future.cancelled():
                future.exception()  # no part may still be on its way when the upload is aborted
        try:
            s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
        except Exception as exc:  # the original failure is the one to raise
            logger.warning("could not abort the multipart upload of %s: %s", key, exc)
        raise
    return sha256.hexdigest()


def upload_file(
    s3: Any,
    path: Path,
    bucket: str,
    key: str,
    extra: dict[str, str] | None = None,
    *,
    parts: PartUploader | None = None,
) -> tuple[int, str]:
    """Upload one regular file, never a link's target; return its size and SHA-256 (hex).

    The size, the digest and the upload all come from one descriptor opened with ``O_NOFOLLOW``, so a file
    swapped for a link after it was listed is refused rather than followed.

    Parameters
    ----------
    s3
        A boto3 S3 client (thread-safe: parts share it).
    path
        The file.
    bucket, key
        Where it goes.
    extra
        More ``PutObject`` / ``CreateMultipartUpload`` arguments (``ContentType``...). The checksums are
        chosen here.
    parts
        The part senders to use for a large file; None: a pool of its own for this file.

    Returns
    -------
    tuple[int, str]
        Bytes uploaded and their SHA-256.

    Raises
    ------
    LinkError
        When ``path`` is a symbolic link or not a regular file.
    FileChangedError
        When the file grew or shrank while it was read (a multipart upload is then aborted).
    """
    extra = dict(extra or {})
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size < MULTIPART_THRESHOLD:
            return size, _put_small(s3, handle, size, bucket, key, extra)
        if parts is not None:
            with parts.file_slot:
                return size, _put_multipart(s3, handle, size, bucket, key, extra, parts)
        with PartUploader() as own:
            return size, _put_multipart(s3, handle, size, bucket, key, extra, own)

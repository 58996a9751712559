"""The transfer bench's fourth tool: AWS's CRT S3 client (``awscrt.s3.S3Client``), verifying as S3 lets it.

The client of the AWS CLI's CRT mode and of Mountpoint for S3, used as they use it: the CRT splits, signs,
sends, writes and checks in C, on its own event loop; Python only lists, submits and waits. Its part size and
multipart threshold are spotrun's (:mod:`spotrun.agent.transfer.ranges`), so both send the same requests.

- **Staging**: the prefix listed with boto3 (as spotrun's ``plan_input`` lists it). An object under
  :data:`~spotrun.agent.transfer.ranges.RANGED_THRESHOLD` is one ``GetObject`` (``S3RequestType.DEFAULT``) with
  ``validate_response``: the CRT checks the body against the response's full-object checksum header (CRC-32 or
  CRC-64/NVME as the object has it). A larger one is the CRT's ranged download (``S3RequestType.GET_OBJECT``) with
  ``response_validation_mode=FULL_OBJECT``: each range checked against its own checksum when the response has
  one, and the whole object against its full-object checksum (found by a ``HeadObject``). The body the CRT
  hands over (``on_body``, in order) is written 64 KiB per ``pwrite``
  (:func:`spotrun.agent.transfer.file_writes.write_at`), as spotrun and the ceiling write: the CRT's own
  ``recv_filepath`` writes a part in one piece, which this machine's kernel makes slow and irregular
  (docs/development/transfers.md, "The size of a write"). A download the CRT reports as not validated
  (``did_validate_checksum`` false) fails the measurement: every byte this tool counts is verified.
- **Upload** (a checkpoint, as :func:`spotrun.agent.checkpoint_store.upload_checkpoint` does it): each file read
  once in Python for the marker's SHA-256 and its full-object CRC-32 (ISA-L, :mod:`spotrun.agent.transfer.crcs`),
  then ``S3RequestType.PUT_OBJECT`` from the file (``send_filepath``) with that CRC-32 as the full-object
  checksum (``x-amz-checksum-crc32``; on a multipart upload the CRT declares ``FULL_OBJECT`` and gives it at
  completion) and a CRC-32 of each part in its header, computed by the CRT. S3 checks each part and the whole
  object; the object keeps a full-object CRC-32, so staging can verify it. Then the commit marker, with boto3.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import urllib.parse
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

# Python's share of an upload (SHA-256 and CRC-32 of each file) runs on this many threads; hashlib and ISA-L
# release the GIL on large buffers, so two cores are both used.
HASH_THREADS = 4
_READ_BYTES = 2 * 1024 * 1024


class CrtTransferError(RuntimeError):
    """A CRT request failed, or a download it did not validate."""


class CrtTool:
    """One CRT S3 client for the bench's endpoint (plain HTTP, path-style, static credentials)."""

    def __init__(self, endpoint: str, region: str, access_key: str, secret_key: str):
        import awscrt.auth
        import awscrt.io
        import awscrt.s3

        from spotrun.agent.transfer.ranges import RANGED_THRESHOLD

        url = urllib.parse.urlsplit(endpoint)
        self.host = url.netloc
        events = awscrt.io.EventLoopGroup()
        bootstrap = awscrt.io.ClientBootstrap(events, awscrt.io.DefaultHostResolver(events))
        provider = awscrt.auth.AwsCredentialsProvider.new_static(access_key, secret_key)
        self.client = awscrt.s3.S3Client(
            bootstrap=bootstrap,
            region=region,
            tls_mode=(
                awscrt.s3.S3RequestTlsMode.ENABLED
                if url.scheme == "https"
                else awscrt.s3.S3RequestTlsMode.DISABLED
            ),
            signing_config=awscrt.s3.create_default_s3_signing_config(
                region=region, credential_provider=provider
            ),
            multipart_upload_threshold=RANGED_THRESHOLD,
        )

    def _request(self, method: str, bucket: str, key: str, headers: list[tuple[str, str]]) -> Any:
        import awscrt.http

        path = f"/{bucket}/" + urllib.parse.quote(key, safe="/~")
        return awscrt.http.HttpRequest(method, path, awscrt.http.HttpHeaders([("host", self.host), *headers]))

    def get(self, bucket: str, key: str, size: int, path: Path, part_size: int) -> Future[int]:
        """Download ``s3://bucket/key`` (``size`` bytes, from the listing) into ``path``; the future's result: ``size``.

        A large object is fetched in ranges of ``part_size`` bytes.

        The future fails with :class:`CrtTransferError` when the request failed or the CRT did not validate it.
        """
        import awscrt.s3

        from spotrun.agent.transfer.file_writes import write_at
        from spotrun.agent.transfer.ranges import RANGED_THRESHOLD

        ranged = size >= RANGED_THRESHOLD
        config = awscrt.s3.S3ChecksumConfig(
            validate_response=True,
            response_validation_mode=awscrt.s3.S3ChecksumValidationMode.FULL_OBJECT if ranged else None,
        )
        result: Future[int] = Future()
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)

        def on_body(chunk: bytes, offset: int, **_: Any) -> None:
            write_at(descriptor, chunk, offset)

        def on_done(error: Exception | None = None, did_validate_checksum: bool = False, **_: Any) -> None:
            os.close(descriptor)
            if error is not None:
                result.set_exception(CrtTransferError(f"GET {key}: {error}"))
            elif not did_validate_checksum:
                result.set_exception(CrtTransferError(f"GET {key}: the CRT did not validate a checksum"))
            else:
                result.set_result(size)

        self.client.make_request(
            type=awscrt.s3.S3RequestType.GET_OBJECT if ranged else awscrt.s3.S3RequestType.DEFAULT,
            operation_name=None if ranged else "GetObject",
            request=self._request("GET", bucket, key, [("Content-Length", "0")]),
            on_body=on_body,
            checksum_config=config,
            part_size=part_size,
            on_done=on_done,
        )
        return result

    def put(self, bucket: str, key: str, path: Path, size: int, crc32: int) -> Future[int]:
        """Upload ``path`` (``size`` bytes, full-object CRC-32 ``crc32``) to ``s3://bucket/key``; result: ``size``.

        Parts of :func:`~spotrun.agent.transfer.ranges.part_size` bytes, as spotrun's multipart upload cuts them.
        """
        import awscrt.s3

        from spotrun.agent.transfer.ranges import RANGED_THRESHOLD, part_size

        full = base64.b64encode(crc32.to_bytes(4, "big")).decode()
        headers = [
            ("Content-Length", str(size)),
            ("x-amz-checksum-crc32", full),
            # What S3 records the checksum under (the SDKs send it beside the value).
            ("x-amz-sdk-checksum-algorithm", "CRC32"),
        ]
        result: Future[int] = Future()

        def on_done(error: Exception | None = None, **_: Any) -> None:
            if error is not None:
                result.set_exception(CrtTransferError(f"PUT {key}: {error}"))
            else:
                result.set_result(size)

        self.client.make_request(
            type=awscrt.s3.S3RequestType.PUT_OBJECT,
            request=self._request("PUT", bucket, key, headers),
            send_filepath=str(path),
            part_size=part_size(size),
            multipart_upload_threshold=RANGED_THRESHOLD,
            checksum_config=awscrt.s3.S3ChecksumConfig(
                algorithm=awscrt.s3.S3ChecksumAlgorithm.CRC32, location=awscrt.s3.S3ChecksumLocation.HEADER
            ),
            on_done=on_done,
        )
        return result


def _sha256_and_crc32(path: Path) -> tuple[int, str, int]:
    from spotrun.agent.transfer.crcs import crc32

    digest, crc, size = hashlib.sha256(), 0, 0
    with path.open("rb", buffering=0) as handle:
        while chunk := handle.read(_READ_BYTES):
            digest.update(chunk)
            crc = crc32(chunk, crc)
            size += len(chunk)
    return size, digest.hexdigest(), crc


def crt_stage(tool: CrtTool, s3: Any, bucket: str, prefix: str, destination: Path, workers: int) -> int:
    """Stage every object under ``prefix`` into ``destination`` through the CRT; returns the bytes verified.

    Large objects are cut into ranges as spotrun's staging cuts them for ``workers``
    (:func:`~spotrun.agent.transfer.ranges.range_size` over :func:`~spotrun.agent.transfer.ranges.ranged_streams`).
    """
    from spotrun.agent.transfer.download import iter_objects
    from spotrun.agent.transfer.ranges import RANGED_THRESHOLD, part_size, range_size, ranged_streams

    objects = list(iter_objects(s3, bucket, prefix))
    ranges = range_size(sum(size for _, size in objects if size >= RANGED_THRESHOLD), ranged_streams(workers))
    futures = [
        tool.get(bucket, key, size, destination / key[len(prefix) :], ranges or part_size(size))
        for key, size in objects
    ]
    return sum(future.result() for future in futures)


def crt_upload(tool: CrtTool, s3: Any, bucket: str, source: Path, job_id: str, step: int) -> int:
    """Upload the checkpoint directory ``source`` through the CRT, then its commit marker; returns the bytes."""
    from spotrun.agent.checkpoint_store import commit_time, local_files, put_marker
    from spotrun.model import layout
    from spotrun.model.agent_protocol.checkpoints import CheckpointFile, CommitMarker

    prefix = layout.checkpoint_prefix(job_id, step)
    files = local_files(source)
    listed: list[CheckpointFile] = []
    puts: list[Future[int]] = []
    lock = threading.Lock()

    def hash_and_put(item: tuple[str, Path]) -> None:
        relative, path = item
        size, sha256, crc = _sha256_and_crc32(path)
        future = tool.put(bucket, prefix + relative, path, size, crc)
        with lock:
            listed.append(CheckpointFile(path=relative, size=size, sha256=sha256))
            puts.append(future)

    with ThreadPoolExecutor(max_workers=HASH_THREADS) as pool:
        list(pool.map(hash_and_put, files))
    moved = sum(future.result() for future in puts)
    marker = CommitMarker(
        job_id=job_id,
        step=step,
        files=sorted(listed, key=lambda f: f.path),
        bytes=moved,
        committed_at=commit_time(),
    )
    put_marker(s3, bucket, layout.commit_marker_key(job_id, step), marker)
    return moved

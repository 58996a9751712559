"""Which check a downloaded object gets, and the digests that check it in one pass over its bytes.

The check is the strongest one the object allows, in this order:

1. a SHA-256 known in advance (a checkpoint's commit marker lists one per file);
2. S3's full-object ``ChecksumSHA256`` (objects uploaded in one PUT with ``ChecksumAlgorithm="SHA256"``);
3. S3's full-object ``ChecksumCRC32`` (what recent SDKs add by default, and multipart uploads of type
   ``FULL_OBJECT``);
4. S3's ``ChecksumCRC64NVME`` (always full-object: what S3 adds to an object uploaded without a checksum), when
   the agent has the CRT to compute it (:mod:`spotrun.agent.transfer.crcs`);
5. the MD5 in a single-part ETag (not for SSE-KMS / SSE-C objects, whose ETag is not an MD5);

and always the size against ``ContentLength``. A composite checksum (``...-N``: a checksum of the parts'
checksums) is not reproducible from the bytes, so it is not used
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html).

Every byte is hashed once. A CRC is computed per range, in parallel, and the ranges' CRCs combined
(:mod:`spotrun.agent.transfer.crcs`, as zlib's ``crc32_combine``); SHA-256 and MD5 are sequential, so
:class:`OrderedDigest` feeds them each range once all the ranges before it have landed.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spotrun.agent.transfer.crcs import crc32, running_crc
from spotrun.agent.transfer.plan import Algorithm


@dataclass(frozen=True)
class Expectation:
    """What a downloaded body must match: its size, and a digest when one is known."""

    size: int
    algorithm: Algorithm
    s3_value: str | None = None  # as S3 reports it: base64 for checksums, hex for an ETag's MD5
    sha256_hex: str | None = None


def expectation_for(response: dict[str, Any], sha256_hex: str | None = None) -> Expectation:
    """Choose the check for a ``get_object`` / ``head_object`` response (pure: reads only its headers).

    Parameters
    ----------
    response
        The response of ``get_object(..., ChecksumMode="ENABLED")`` or ``head_object`` with the same.
    sha256_hex
        A SHA-256 known in advance, if any.

    Returns
    -------
    Expectation
        The strongest check available; ``algorithm="size"`` when only the size can be checked.
    """
    size = int(response["ContentLength"])
    composite = response.get("ChecksumType") == "COMPOSITE"
    sha256 = response.get("ChecksumSHA256")
    if sha256 and not composite and "-" not in sha256:
        return Expectation(size, "sha256", sha256, sha256_hex)
    if sha256_hex:
        return Expectation(size, "sha256", None, sha256_hex)
    crcs: tuple[tuple[Algorithm, str], ...] = (("crc32", "ChecksumCRC32"), ("crc64nvme", "ChecksumCRC64NVME"))
    for algorithm, field in crcs:
        value = response.get(field)
        if value and not composite and "-" not in value and running_crc(algorithm) is not None:
            return Expectation(size, algorithm, value)
    etag = str(response.get("ETag", "")).strip('"')
    encrypted_with_key = response.get("ServerSideEncryption") == "aws:kms" or response.get(
        "SSECustomerAlgorithm"
    )
    if etag and "-" not in etag and len(etag) == 32 and not encrypted_with_key:
        return Expectation(size, "md5", etag.lower())
    return Expectation(size, "size")


def problems(expected: Expectation, size: int, digest: bytes | int | None) -> list[str]:
    """What is wrong with a body of ``size`` bytes and ``digest`` (the expectation's algorithm) (empty: none).

    Parameters
    ----------
    expected
        The check.
    size
        Bytes received.
    digest
        The SHA-256 or MD5 digest (bytes) or the CRC (int) of those bytes; None for a size-only check.

    Returns
    -------
    list[str]
        One line per mismatch.
    """
    found = []
    if size != expected.size:
        found.append(f"size {size} != ContentLength {expected.size}")
    if expected.algorithm == "sha256":
        assert isinstance(digest, bytes)
        if expected.s3_value and base64.b64encode(digest).decode() != expected.s3_value:
            found.append("SHA-256 differs from the object's ChecksumSHA256")
        if expected.sha256_hex and digest.hex() != expected.sha256_hex.lower():
            found.append("SHA-256 differs from the expected digest")
    elif (running := running_crc(expected.algorithm)) is not None:
        assert isinstance(digest, int)
        if running.encode(digest) != expected.s3_value:
            found.append(f"{running.name} differs from the object's Checksum{running.name}")
    elif expected.algorithm == "md5":
        assert isinstance(digest, bytes)
        if digest.hex() != expected.s3_value:
            found.append("MD5 differs from the ETag")
    return found


def new_hash(algorithm: Algorithm) -> Any:
    """A hashlib object for a sequential algorithm (``sha256`` / ``md5``), None for a CRC or ``size``."""
    if algorithm == "sha256":
        return hashlib.sha256()
    if algorithm == "md5":
        return hashlib.md5(usedforsecurity=False)
    return None


def sdk_checksum(body: Any, algorithm: Algorithm) -> Any:
    """The running checksum botocore keeps over ``body``, when it is of ``algorithm``; None otherwise.

    botocore validates a ``GetObject`` body against the ``x-amz-checksum-*`` header it chose
    (``response_checksum_validation``, "when_supported" by default, or ``ChecksumMode="ENABLED"``): its
    ``StreamingChecksumBody`` feeds every byte read to a checksum object, exposed as ``body.checksum``
    (https://docs.aws.amazon.com/sdkref/latest/guide/feature-dataintegrity.html). When that checksum is of the
    algorithm staging's :class:`Expectation` names, its digest is the one staging needs: taking it saves a
    second pass over the same bytes. botocore prefers a CRC to a SHA-256 when an object has both, so the types
    are compared, never assumed.

    Parameters
    ----------
    body
        A ``get_object`` response's ``Body``.
    algorithm
        The expectation's algorithm.

    Returns
    -------
    Any
        An object with ``digest() -> bytes`` (a CRC as big-endian bytes), or None.
    """
    from botocore import httpchecksum

    kinds: tuple[type, ...] = {
        "sha256": (httpchecksum.Sha256Checksum,),
        "crc32": (httpchecksum.Crc32Checksum, httpchecksum.CrtCrc32Checksum),
        "crc64nvme": (httpchecksum.CrtCrc64NvmeChecksum,),
    }.get(algorithm, ())
    if not kinds or not isinstance(body, httpchecksum.StreamingChecksumBody):
        return None
    checksum = body.checksum
    return checksum if isinstance(checksum, kinds) else None


def body_reader(body: Any, algorithm: Algorithm) -> tuple[Callable[[int], bytes], Any]:
    """How staging reads a ``GetObject`` body, and the running checksum of botocore it shares (or None).

    Usually ``body.read`` and :func:`sdk_checksum`: botocore's digest is the one staging compares. But
    botocore's CRC-32 is zlib's (1.5-3 GB/s here) and the agent's :func:`crc32` may be ISA-L's (tens of GB/s):
    then the body is read with ``botocore.response.StreamingBody.read``, the read of the class botocore's
    ``StreamingChecksumBody`` extends (its own ``read`` is that read, plus the checksum update and, at the end,
    the comparison with the ``x-amz-checksum-crc32`` header). Staging's :class:`StreamDigest` computes the
    CRC-32 instead, and compares it with the same header (the response's ``ChecksumCRC32``). The check is the
    same: one CRC-32 of every byte against S3's, the size against ``Content-Length`` (which
    ``StreamingBody.read`` still checks).

    Parameters
    ----------
    body
        A ``get_object`` response's ``Body``.
    algorithm
        The expectation's algorithm.

    Returns
    -------
    tuple
        ``read(amount) -> bytes``, and the shared checksum for :class:`StreamDigest` (None: staging hashes).
    """
    shared = sdk_checksum(body, algorithm)
    if shared is not None and algorithm == "crc32" and crc32 is not zlib.crc32:
        from botocore.response import StreamingBody

        return functools.partial(StreamingBody.read, body), None
    return body.read, shared


class StreamDigest:
    """The one digest an :class:`Expectation` needs, over a body read front to back in chunks.

    Parameters
    ----------
    expectation
        The check.
    shared
        A running checksum of the expectation's algorithm that sees the same bytes as they are read (botocore's,
        from :func:`sdk_checksum`): its digest is used, and the bytes are not hashed a second time. None: they
        are hashed here.
    """

    def __init__(self, expectation: Expectation, shared: Any = None):
        self.expectation = expectation
        self.size = 0
        self._crc = 0
        self._shared = shared
        self._hash = None if shared is not None else new_hash(expectation.algorithm)
        self._running = running_crc(expectation.algorithm)

    def update(self, chunk: bytes) -> None:
        """Add the next chunk."""
        self.size += len(chunk)
        if self._shared is not None:
            return  # the shared checksum has seen this chunk already
        if self._hash is not None:
            self._hash.update(chunk)
        elif self._running is not None:
            self._crc = self._running.update(chunk, self._crc)

    def problems(self) -> list[str]:
        """What is wrong with the bytes seen (empty: nothing)."""
        digest: bytes | int | None = self._crc if self._running is not None else None
        if self._shared is not None:
            raw = bytes(self._shared.digest())
            digest = int.from_bytes(raw, "big") if self._running is not None else raw
        elif self._hash is not None:
            digest = self._hash.digest()
        return problems(self.expectation, self.size, digest)


class OrderedDigest:
    """A sequential digest (SHA-256, MD5) over a file written by ranges that land in any order.

    Each range, once written, is reported with :meth:`landed`; the thread that completes the contiguous prefix
    reads the newly contiguous ranges back (``os.pread``: from the page cache, just written) and hashes them,
    so hashing overlaps the download and each byte is hashed once.

    Parameters
    ----------
    algorithm
        ``sha256`` or ``md5``.
    descriptor
        The file being written (opened for reading too).
    ranges
        The ``(offset, length)`` of every range, in file order.
    """

    _READ = 8 * 1024 * 1024

    def __init__(self, algorithm: Algorithm, descriptor: int, ranges: list[tuple[int, int]]):
        self._hash = new_hash(algorithm)
        self._descriptor = descriptor
        self._ranges = ranges
        self._landed = [False] * len(ranges)
        self._next = 0
        self._hashing = False
        self._lock = threading.Lock()
        self.hashed = 0

    def landed(self, index: int) -> None:
        """Range ``index`` is written: hash it, and those after it that are, if it completes the prefix."""
        with self._lock:
            self._landed[index] = True
            if self._hashing:
                return  # the thread hashing now will reach it
            self._hashing = True
        while True:
            with self._lock:
                if self._next >= len(self._ranges) or not self._landed[self._next]:
                    self._hashing = False
                    return
                offset, length = self._ranges[self._next]
            self._hash_range(offset, length)
            with self._lock:
                self._next += 1

    def _hash_range(self, offset: int, length: int) -> None:
        end = offset + length
        while offset < end:
            chunk = os.pread(self._descriptor, min(self._READ, end - offset), offset)
            if not chunk:
                raise OSError(f"short read of a staged file at offset {offset}")
            self._hash.update(chunk)
            self.hashed += len(chunk)
            offset += len(chunk)

    def digest(self) -> bytes:
        """The digest of every range (all must have landed)."""
        if self._next != len(self._ranges):
            raise RuntimeError("not every range of the file has been hashed")
        return bytes(self._hash.digest())

"""The CRCs S3 keeps as full-object checksums that staging computes: CRC-32 and CRC-64/NVME, and their combining.

A CRC is computed per range, in parallel, and the ranges' CRCs combined: appending ``len(b)`` zero bytes to ``a``
is a linear operator on ``crc(a)`` over GF(2), so ``crc(a + b)`` follows from ``crc(a)``, ``crc(b)`` and
``len(b)`` (zlib's ``crc32_combine``). That holds for any reflected CRC whose initial value and final xor are
equal, which both CRCs here are (all ones).

- CRC-32 (zlib's): :data:`crc32` is ISA-L's (the ``agent`` extra's ``isal``) when it is installed, else zlib's;
  both compute the same CRC-32.
- CRC-64/NVME: what S3 adds to an object uploaded without a checksum, and what recent SDKs and the AWS CLI may
  send (https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html). Computed by the
  AWS Common Runtime (``awscrt``, in the ``agent`` extra), as botocore computes it; without ``awscrt``,
  :func:`running_crc` has none, and staging falls back to the next check an object allows.
"""

from __future__ import annotations

import base64
import functools
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_CRC32_POLYNOMIAL = 0xEDB88320  # zlib's CRC-32, reflected
_CRC64NVME_POLYNOMIAL = 0x9A6C9329AC4BC9B5  # CRC-64/NVME (0xAD93D23594C93659), reflected


def _fastest_crc32() -> Any:
    # ISA-L's crc32 (carry-less multiplication, PCLMULQDQ / VPCLMULQDQ) computes zlib's CRC-32 at tens of GB/s
    # where zlib 1.2's table-driven one does 1.5-3 GB/s: measured on the bench machine, 1 MiB buffers,
    # docs/development/transfers.md. Same polynomial, same chaining argument, same result
    # (tests/unit/test_transfer_crc.py).
    try:
        from isal.isal_zlib import crc32 as isal_crc32
    except ImportError:  # the agent installed without its extra: zlib's, slower, the same values
        return zlib.crc32
    return isal_crc32


crc32 = _fastest_crc32()
"""``crc32(data, value=0) -> int``: zlib's CRC-32 of ``data`` continuing from ``value``, the fastest available."""


def _gf2_times(matrix: list[int] | tuple[int, ...], vector: int) -> int:
    total = 0
    row = 0
    while vector:
        if vector & 1:
            total ^= matrix[row]
        vector >>= 1
        row += 1
    return total


def _gf2_square(matrix: list[int]) -> list[int]:
    return [_gf2_times(matrix, column) for column in matrix]


@functools.lru_cache(maxsize=64)
def _zeros_operator(polynomial: int, width: int, length: int) -> tuple[int, ...]:
    """The GF(2) matrix that moves a CRC past ``length`` zero bytes (ranges share a few lengths: cached)."""
    # By repeated squaring of the one-zero-bit operator, composing the powers of two that make up the length.
    power = [polynomial] + [1 << row for row in range(width - 1)]  # one zero bit
    for _ in range(3):
        power = _gf2_square(power)  # now one zero byte
    result: list[int] | None = None
    while length:
        if length & 1:
            result = power if result is None else [_gf2_times(power, column) for column in result]
        length >>= 1
        if length:
            power = _gf2_square(power)
    assert result is not None
    return tuple(result)


def _combine(polynomial: int, width: int, crc1: int, crc2: int, length2: int) -> int:
    if length2 <= 0:
        return crc1
    # Appending len(b) zero bytes to a is a linear operator on its CRC; then b's CRC is added (xor).
    return _gf2_times(_zeros_operator(polynomial, width, length2), crc1) ^ crc2


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """CRC-32 of ``a + b`` from ``crc32(a)``, ``crc32(b)`` and ``len(b)`` (zlib's ``crc32_combine``).

    Parameters
    ----------
    crc1
        ``zlib.crc32(a)``.
    crc2
        ``zlib.crc32(b)``.
    length2
        ``len(b)``.

    Returns
    -------
    int
        ``zlib.crc32(a + b)``.
    """
    return _combine(_CRC32_POLYNOMIAL, 32, crc1, crc2, length2)


@dataclass(frozen=True)
class RunningCrc:
    """One CRC that S3 keeps as a full-object checksum: computed over chunks, combined over ranges.

    Attributes
    ----------
    name
        S3's name for it (``CRC32``, ``CRC64NVME``): ``ChecksumCRC32`` is its field, and a mismatch names it.
    update
        ``update(data, value) -> int``: the CRC of ``data`` continuing from ``value`` (0 to start).
    width
        Its width in bits.
    polynomial
        Its reflected polynomial.
    """

    name: str
    update: Callable[[bytes, int], int]
    width: int
    polynomial: int

    def combine(self, crc1: int, crc2: int, length2: int) -> int:
        """The CRC of ``a + b`` from the CRCs of ``a`` and ``b`` and ``len(b)``."""
        return _combine(self.polynomial, self.width, crc1, crc2, length2)

    def encode(self, value: int) -> str:
        """The value as S3 reports it: big-endian bytes, base64."""
        return base64.b64encode(value.to_bytes(self.width // 8, "big")).decode()


@functools.cache
def running_crc(algorithm: str) -> RunningCrc | None:
    """The :class:`RunningCrc` of staging's ``crc32`` or ``crc64nvme`` check; None for any other, or without awscrt.

    Parameters
    ----------
    algorithm
        A check's algorithm (``spotrun.agent.transfer.plan.Algorithm``).
    """
    if algorithm == "crc32":
        return RunningCrc("CRC32", crc32, 32, _CRC32_POLYNOMIAL)
    if algorithm == "crc64nvme":
        try:
            from awscrt import checksums
        except ImportError:
            return None
        return RunningCrc("CRC64NVME", checksums.crc64nvme, 64, _CRC64NVME_POLYNOMIAL)
    return None

"""The CRCs staging combines over ranges: CRC-32 (zlib's) and CRC-64/NVME (the CRT's), and their availability."""

from __future__ import annotations

import base64
import sys
import zlib

import pytest
from awscrt import checksums
from hypothesis import given
from hypothesis import strategies as st

from spotrun.agent.transfer import crcs


@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_combining_two_crc64nvmes_gives_the_crc64nvme_of_the_concatenation(a: bytes, b: bytes) -> None:
    # Given the CRC-64/NVME of each part, as the CRT computes it
    running = crcs.running_crc("crc64nvme")
    assert running is not None

    # When they are combined with the second part's length
    combined = running.combine(checksums.crc64nvme(a), checksums.crc64nvme(b), len(b))

    # Then it is the CRC-64/NVME of both, one after the other
    assert combined == checksums.crc64nvme(a + b)


@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_combining_two_crc32s_gives_zlibs_crc32_of_the_concatenation(a: bytes, b: bytes) -> None:
    # Given zlib's CRC-32 of each part; When combined; Then it is the CRC-32 of both
    assert crcs.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_a_crc_is_encoded_as_s3_reports_it() -> None:
    # Given the CRCs of a known input (CRC-64/NVME's check value is that of b"123456789")
    crc64, crc32 = crcs.running_crc("crc64nvme"), crcs.running_crc("crc32")
    assert crc64 is not None
    assert crc32 is not None

    # When / Then: big-endian bytes of the CRC's width, base64
    assert (
        crc64.encode(crc64.update(b"123456789", 0))
        == base64.b64encode(bytes.fromhex("ae8b14860a799888")).decode()
    )
    assert crc32.encode(crc32.update(b"123456789", 0)) == base64.b64encode(bytes.fromhex("cbf43926")).decode()


def test_without_the_crt_there_is_no_crc64nvme_and_crc32_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an agent installed without its extra (no awscrt)
    monkeypatch.setitem(sys.modules, "awscrt", None)
    crcs.running_crc.cache_clear()
    try:
        # When / Then
        assert crcs.running_crc("crc64nvme") is None
        assert crcs.running_crc("crc32") is not None
        assert crcs.running_crc("sha256") is None
    finally:
        crcs.running_crc.cache_clear()

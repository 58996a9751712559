"""The agent's CRC-32 (spotrun.agent.transfer.crcs.crc32): ISA-L's when installed, zlib's otherwise, the same values."""

from __future__ import annotations

import os
import sys
import zlib

import pytest

from spotrun.agent.transfer import crcs, crt_gets, integrity, upload


def test_the_agent_computes_crc32_with_isal_when_it_is_installed() -> None:
    # Given the dev install, which has the agent extra (isal)
    from isal import isal_zlib

    # When the fastest CRC-32 is chosen, as crcs does at import
    chosen = crcs._fastest_crc32()

    # Then it is ISA-L's, and staging's checks, the CRT's callbacks and upload use the module's one
    assert chosen is isal_zlib.crc32
    assert crcs.crc32 is isal_zlib.crc32
    running = crcs.running_crc("crc32")
    assert running is not None
    assert running.update is crcs.crc32
    assert integrity.crc32 is crt_gets.crc32 is upload.crc32 is crcs.crc32


def test_without_isal_the_agent_falls_back_to_zlib(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an agent installed without its extra (importing isal fails)
    monkeypatch.setitem(sys.modules, "isal.isal_zlib", None)

    # When the fastest CRC-32 is chosen
    chosen = crcs._fastest_crc32()

    # Then it is zlib's
    assert chosen is zlib.crc32


@pytest.mark.parametrize("length", [0, 1, 7, 4096, 1024 * 1024 + 3])
def test_the_chosen_crc32_gives_zlibs_values_and_chains_like_it(length: int) -> None:
    # Given random bytes, split in two at an odd place
    data = os.urandom(length)
    cut = length // 3

    # When the agent's CRC-32 is computed whole and chained over the two parts
    whole = crcs.crc32(data)
    chained = crcs.crc32(data[cut:], crcs.crc32(data[:cut]))

    # Then both are zlib's CRC-32 (the value S3's ChecksumCRC32 carries)
    assert whole == chained == zlib.crc32(data)

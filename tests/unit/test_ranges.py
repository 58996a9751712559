"""How large objects are cut into ranges, and how many ranged GETs are in flight (spotrun.agent.transfer.ranges)."""

from __future__ import annotations

import os

import pytest

from spotrun.agent.transfer import ranges
from spotrun.agent.transfer.ranges import MIB, part_size, range_size, ranged_streams, ranges_of


def test_an_object_alone_is_cut_into_about_16_parts_of_8_to_64_mib():
    # Given / When / Then: whole MiB, the last part short
    assert part_size(256 * MIB) == 16 * MIB
    assert len(ranges_of(256 * MIB)) == 16
    assert part_size(20 * MIB) == 8 * MIB
    assert part_size(4096 * MIB) == 64 * MIB
    assert ranges_of(24 * MIB + 12345)[-1] == (24 * MIB, 12345)


@pytest.mark.parametrize(
    ("total", "streams", "expected"),
    [
        (4 * 256 * MIB, 16, 32 * MIB),  # two ranges per stream
        (4 * 256 * MIB, 32, 16 * MIB),
        (256 * MIB, 16, 8 * MIB),  # never under 8 MiB
        (10 * 1024 * MIB, 32, 64 * MIB),  # never over 64 MiB
        (33 * MIB, 1, 17 * MIB),  # whole MiB, rounded up
    ],
)
def test_a_staging_s_ranges_give_each_stream_about_two(total, streams, expected):
    # Given the bytes of every large object and the streams / When / Then
    assert range_size(total, streams) == expected


def test_without_a_known_large_object_each_object_gets_its_own_part_size():
    # Given no listed size / When / Then
    assert range_size(0, 16) is None
    assert ranges_of(256 * MIB, None) == ranges_of(256 * MIB, 16 * MIB)


def test_a_given_range_size_cuts_the_object():
    # Given 32 MiB ranges / When a 100 MiB object is cut / Then three whole ranges and the rest
    assert ranges_of(100 * MIB, 32 * MIB) == [
        (0, 32 * MIB),
        (32 * MIB, 32 * MIB),
        (64 * MIB, 32 * MIB),
        (96 * MIB, 4 * MIB),
    ]


@pytest.mark.parametrize(
    ("workers", "cpus", "expected"),
    [(32, 1, 4), (32, 2, 8), (32, 4, 16), (32, 8, 32), (32, 96, 32), (4, 2, 4), (0, 2, 1)],
)
def test_ranged_streams_are_the_workers_at_most_four_per_cpu(workers, cpus, expected):
    # Given workers asked for and the CPUs / When / Then
    assert ranged_streams(workers, cpus) == expected


def test_the_cpus_counted_are_those_the_process_may_run_on(monkeypatch):
    # Given a process pinned to 3 of the host's CPUs
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)

    # When / Then
    assert ranges.usable_cpus() == 3
    assert ranged_streams(64) == 12

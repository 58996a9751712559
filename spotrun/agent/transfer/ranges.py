"""How a large object is cut into byte ranges, and how many of them are in flight: staging's ranged GETs and
upload's parts.

S3 serves byte ranges of one object in parallel, and AWS's guidance for large objects is ranges of 8-16 MB with
"one concurrent request for each 85-90 MB/s of desired network throughput ... about 15 concurrent requests" to
fill 10 Gb/s
(https://docs.aws.amazon.com/whitepapers/latest/s3-optimizing-performance-best-practices/horizontal-scaling-and-request-parallelization-for-high-throughput.html).

- An object on its own (an upload's parts, an object whose size nobody listed) is cut into about
  :data:`TARGET_PARTS` parts of 8-64 MiB (:func:`part_size`).
- Staging knows every large object it will fetch (the listing gives their sizes), and cuts them all to one range
  size (:func:`range_size`): about :data:`RANGES_PER_STREAM` ranges per stream, as few requests as keep every
  stream busy to the end. Each GET costs a request's latency on S3, and about a millisecond of the agent's CPU.
- Staging keeps at most :data:`STREAMS_PER_CPU` ranged GETs in flight per CPU it may use
  (:func:`ranged_streams`).
"""

from __future__ import annotations

import os

MIB = 1024 * 1024
RANGED_THRESHOLD = 16 * MIB  # below it, one GET (or one PUT) per object
MIN_PART = 8 * MIB
MAX_PART = 64 * MIB
TARGET_PARTS = 16  # parts per object alone
# By AWS's rule (85-90 MB/s a stream), 4 per vCPU is ~5.6 Gb/s on 2 vCPUs, ~11 Gb/s on 4 and 32 streams (the
# workers) from 8 on. An instance of 16 vCPUs or fewer has an "up to" bandwidth: a lower baseline, and bursts for
# minutes (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html). Past that,
# Python threads cost more CPU in switching than they move: on two cores shared with the emulator, 8 streams
# went 1,221 MB/s, 16 streams 1,138 and 32 about 1,000 (paired runs in fresh processes; the rule:
# docs/development/transfers.md, "Staging").
STREAMS_PER_CPU = 4
RANGES_PER_STREAM = 2  # each stream's second range evens out when the streams finish


def part_size(size: int) -> int:
    """The part size for an object of ``size`` bytes on its own: ~:data:`TARGET_PARTS` parts of 8-64 MiB.

    Parameters
    ----------
    size
        The object's size in bytes.

    Returns
    -------
    int
        Bytes per part (whole MiB; the last part may be shorter).
    """
    return _whole_mib(-(-size // TARGET_PARTS))


def range_size(total: int, streams: int) -> int | None:
    """The range size for large objects of ``total`` bytes in all, fetched over ``streams`` streams.

    About :data:`RANGES_PER_STREAM` ranges per stream, 8-64 MiB: 4 x 256 MiB over 8 streams, 64 MiB, and over
    16, 32 MiB; one 256 MiB object over 8 streams, 16 MiB; 10 GiB over 32 streams, 64 MiB.

    Parameters
    ----------
    total
        The bytes of every object fetched in ranges.
    streams
        Ranged GETs in flight at once.

    Returns
    -------
    int or None
        Bytes per range (whole MiB); None when ``total`` is 0 (each object then gets :func:`part_size`).
    """
    if total <= 0:
        return None
    return _whole_mib(-(-total // (max(1, streams) * RANGES_PER_STREAM)))


def _whole_mib(wanted: int) -> int:
    return min(MAX_PART, max(MIN_PART, -(-wanted // MIB) * MIB))


def ranges_of(size: int, part: int | None = None) -> list[tuple[int, int]]:
    """``(offset, length)`` of each range of an object of ``size`` bytes, in order.

    Parameters
    ----------
    size
        The object's size in bytes.
    part
        Bytes per range (:func:`range_size`). None: :func:`part_size` of the object.
    """
    step = part or part_size(size)
    return [(offset, min(step, size - offset)) for offset in range(0, size, step)]


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity (``taskset``, a container's cpuset), not the host's count.

    A CPU quota (``docker --cpus``) is not an affinity, and is not counted.
    """
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def ranged_streams(workers: int, cpus: int | None = None) -> int:
    """Ranged GETs in flight at once: ``workers``, at most :data:`STREAMS_PER_CPU` per CPU.

    Parameters
    ----------
    workers
        The streams asked for (staging's ``max_workers``).
    cpus
        The CPUs to count on; None: :func:`usable_cpus`.
    """
    return max(1, min(workers, STREAMS_PER_CPU * (cpus or usable_cpus())))

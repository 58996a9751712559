"""The agent process's memory allocator: keep the buffers a transfer frees for the next transfer.

Staging 1,000 objects of 1 MiB allocates and frees a few thousand buffers of 16 KiB to 1 MiB on some 40 threads:
the CRT's S3 client collects each body in a buffer that grows as it arrives (on its event-loop threads), and
the read-back that checks each file reads it 2 MiB at a time (on staging's threads). glibc's malloc adjusts its
thresholds as it goes (``mallopt(3)``, "M_MMAP_THRESHOLD": a dynamic threshold by default): it maps some of
these blocks and unmaps them when freed, and hands the free memory at the top of each thread's heap back to the
kernel. The next buffer then faults its pages in again, zeroed by the kernel. Staging 1 GiB of 1 MiB objects
takes 24,000 to 28,000 minor page faults with the thresholds fixed, as s5cmd does, against 59,000 to 110,000 and
about 0.8 CPU-s more in the kernel without (docs/development/transfers.md,
"The agent's client config, allocator and CRC-32").

:func:`keep_transfer_buffers` fixes both thresholds: blocks up to :data:`MMAP_THRESHOLD_BYTES` come from the heap,
and a heap keeps up to :data:`TRIM_THRESHOLD_BYTES` of free memory at its top. Setting either one switches the
dynamic adjustment off for both (``mallopt(3)``), so both are set: one alone is worse than neither (770,000
faults per GiB with only the trim threshold). The agent sets them at its start (``spotrun.agent.__main__``);
a resident agent's step children inherit them through the fork, and the user's training command, a new program,
starts with glibc's defaults.
"""

from __future__ import annotations

import ctypes

# mallopt(3)'s parameter numbers, from glibc's <malloc.h>.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Above the largest buffer a transfer makes (staging's 2 MiB reads, a small object's 1 MiB body); large objects
# are ranged, so no body is collected whole.
MMAP_THRESHOLD_BYTES = 4 << 20
# What a heap may keep free at its top: 32 reads of 2 MiB, the most a staging has in flight at its default 32
# workers (ranged staging goes no faster with 128 MiB: 1,050 MB/s against 1,016-1,049 on 4 x 256 MiB).
TRIM_THRESHOLD_BYTES = 64 << 20


def keep_transfer_buffers() -> bool:
    """Fix glibc's mmap and trim thresholds for this process (and the children it forks).

    Returns
    -------
    bool
        True when both were set; False where the C library has no ``mallopt`` (not glibc), which leaves the
        allocator as it was.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # Both or neither: each returns 1 on success.
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )

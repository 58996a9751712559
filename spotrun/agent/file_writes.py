"""Writing received bytes into a file: at most 64 KiB per ``pwrite``, every byte or an error.

Staging writes what it receives (a 256 KiB piece of a range, a small object's whole 1 MiB body) into the page
cache. How large each write is decides how costly the kernel's side is, on this project's development machines:
1 GiB written into fresh files by 32 threads (one thread too), 10 to 12 runs each, alternating:

- 256 KiB per write: 0.7 to 5.9 GB/s from one run to the next, 0.3 to 2.3 CPU-s in the kernel, half the runs
  slow; 128 KiB likewise; 1 MiB per write into 1,000 files: 0.24 to 1.88 CPU-s;
- 64 KiB per write: 3.5 to 4.9 GB/s and about 0.4 CPU-s, every run; 32 KiB: 3.3 to 4.1 GB/s.

In the slow runs the time is the kernel's copy into the page cache (``copy_folio_from_iter_atomic``, with the
other writers spinning on the file's lock behind it). The likely mechanism: ext4 has backed the page cache with
large folios, sized from each write, since Linux 6.16; those come from the allocator's high-order free blocks,
and on a virtual machine with free-page reporting (these machines' virtio-balloon reports free blocks of 8 MiB
and more to the host) such blocks are the ones the host has taken back, so the first write into them waits for
the host to supply them again. Writes of 64 KiB get small folios and did not show it. Where the kernel has no
large folios for the file system, the pieces cost only more system calls: 16,384 per GiB, against the copy of
the same GiB either way.

``pwrite`` may also write less than asked (a full disk, a signal); every byte is written or an ``OSError``
raised, never a silent gap in a file whose size was set in advance.
"""

from __future__ import annotations

import errno
import os

WRITE_BYTES = 64 * 1024


def write_at(descriptor: int, data: bytes | bytearray | memoryview, position: int) -> int:
    """Write all of ``data`` into the file open at ``descriptor`` from ``position``, 64 KiB per system call.

    Parameters
    ----------
    descriptor
        A file open for writing.
    data
        The bytes.
    position
        Where in the file the first byte goes.

    Returns
    -------
    int
        The number of bytes written: all of them.

    Raises
    ------
    OSError
        From ``pwrite`` (no space left, ...), or when it wrote nothing at all.
    """
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        written = os.pwrite(descriptor, view[done : done + WRITE_BYTES], position + done)
        if written <= 0:
            raise OSError(errno.EIO, f"pwrite wrote nothing at offset {position + done}")
        done += written
    return done

"""Writing received bytes into a file: at most 64 KiB per ``pwrite``, every byte or an error.

Staging writes what it receives (a 2 MiB piece of a range, a small object's whole 1 MiB body) into the page
cache, and the size of each write decides what the kernel's side costs. On the development machines, 1 GiB
written in 256 KiB (or 1 MiB) pieces went at 0.7 to 5.9 GB/s from one run to the next (7 runs of 12 slow), the
time in the kernel's copy into the page cache; in 64 KiB pieces at 3.5 to 4.9 GB/s every run. The likely
mechanism (large folios sized from the write, taken from memory the virtual machine's host had reclaimed):
docs/development/transfers.md, "The size of a write" (staging itself still has slow runs, fewer). Where the file
system has no large folios, the pieces cost only more system calls: 16,384 per GiB.

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

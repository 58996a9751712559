"""The agent's own lines in an attempt's log: what it did to the command, each on a line of its own.

The command writes the log directly (it is the command's stdout and stderr); the agent adds a note between runs
(started, ended, signalled). A command whose last output has no newline would have the note glued onto that
line, and the line read as the command's: the note then starts with the newline the output lacked.
"""

from __future__ import annotations

import os
from typing import IO, Final

__all__ = ["NOTE_PREFIX", "write_note"]

NOTE_PREFIX: Final = "--- spotrun:"


def write_note(log: IO[bytes], line: str) -> None:
    """Append ``--- spotrun: <line>`` to ``log`` on a line of its own.

    Parameters
    ----------
    log
        The attempt's log, opened by :func:`spotrun.agent.links.open_append` (readable, so its last byte can
        be seen).
    line
        The note, one line.
    """
    log.flush()
    descriptor = log.fileno()
    size = os.fstat(descriptor).st_size
    unfinished = False
    if size:
        try:
            unfinished = os.pread(descriptor, 1, size - 1) != b"\n"
        except OSError:  # a log opened write-only: the note goes as it used to
            unfinished = False
    log.write(("\n" if unfinished else "").encode() + f"{NOTE_PREFIX} {line}\n".encode())
    log.flush()

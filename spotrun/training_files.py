"""Durable files of the checkpoint contract: the progress file, and flushing or removing what a run writes.

Part of the training helpers (:mod:`spotrun.training`): the standard library only, copied with it onto the
training command's ``PYTHONPATH`` by the agent.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from pathlib import Path

from spotrun.model import layout

# The progress file is rewritten at most this often, however fast the steps go (a new step is held until then).
PROGRESS_MIN_INTERVAL_SECONDS = 0.1


class ProgressFile:
    """The latest step reported, in a small text file replaced atomically (the agent polls it)."""

    def __init__(self, path: Path):
        self.path = path
        self.written: int | None = None
        self.pending: int | None = None
        self.written_at = float("-inf")
        self.warned = False

    def report(self, step: int, *, force: bool) -> None:
        if step == self.written:
            self.pending = None
            return
        self.pending = step
        if force or _clock() - self.written_at >= PROGRESS_MIN_INTERVAL_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self.pending is None:
            return
        step = self.pending
        temporary = self.path.with_name(f"{layout.TEMP_PREFIX}{self.path.name}.{os.getpid()}.tmp")
        try:
            temporary.write_text(f"{step}\n")
            temporary.replace(self.path)
        except OSError as exc:  # progress is information only: training goes on without it
            if not self.warned:
                print(f"spotrun.training: cannot write progress to {self.path}: {exc}", file=sys.stderr)
                self.warned = True
            return
        self.written, self.pending, self.written_at = step, None, _clock()


def _clock() -> float:
    return time.monotonic()


def remove_path(path: Path) -> None:
    """Remove a file or a directory tree, never following a link."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def fsync_tree(directory: Path) -> None:
    """Flush every regular file under ``directory`` to disk."""
    # A checkpoint must survive a crash of the machine once its name is final: flush the files first.
    for path in directory.rglob("*"):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())


def fsync_directory(directory: Path) -> None:
    """Flush a directory's entries (a rename into it) to disk, where the platform allows."""
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

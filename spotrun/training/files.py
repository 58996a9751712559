"""Durable files of the checkpoint contract: the progress and interval files, and writing a checkpoint or a model
atomically (a temporary name, flushed, then renamed), or removing what a run wrote.

Part of the training helpers (:mod:`spotrun.training`): the standard library only, copied with it onto the
training command's ``PYTHONPATH`` by the agent.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from spotrun.model import layout

# The progress file is rewritten at most this often, however fast the steps go (a new step is held until then).
PROGRESS_MIN_INTERVAL_SECONDS = 0.1


class ProgressFile:
    """The latest step reported, in a small text file replaced atomically (the agent polls it).

    The first line is the step (all an older reader looks at); under ``interval_steps: auto`` a
    ``save_seconds=<s>`` line follows once a checkpoint was saved: how long the last
    :meth:`spotrun.training.Run.save_checkpoint` took (the writer, the fsyncs and the rename), the cost the
    agent's interval is computed from.
    """

    def __init__(self, path: Path):
        self.path = path
        self.written: int | None = None
        self.pending: int | None = None
        self.written_at = float("-inf")
        self.warned = False
        self.save_seconds: float | None = None
        self.save_written: float | None = None

    def report(self, step: int, *, force: bool, save_seconds: float | None = None) -> None:
        if save_seconds is not None:
            self.save_seconds = save_seconds
        if step == self.written and self.save_seconds == self.save_written:
            self.pending = None
            return
        self.pending = step
        if force or _clock() - self.written_at >= PROGRESS_MIN_INTERVAL_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self.pending is None:
            return
        step, save_seconds = self.pending, self.save_seconds
        text = f"{step}\n" if save_seconds is None else f"{step}\nsave_seconds={save_seconds:.6f}\n"
        temporary = self.path.with_name(f"{layout.TEMP_PREFIX}{self.path.name}.{os.getpid()}.tmp")
        try:
            temporary.write_text(text)
            temporary.replace(self.path)
        except OSError as exc:  # progress is information only: training goes on without it
            if not self.warned:
                print(f"spotrun.training: cannot write progress to {self.path}: {exc}", file=sys.stderr)
                self.warned = True
            return
        self.written, self.pending, self.written_at = step, None, _clock()
        self.save_written = save_seconds


# ``interval_steps: auto`` before the agent's interval file can be read: the first checkpoint comes after this
# long (the agent writes the same default before the command starts; docs/guides/checkpoint-interval.md).
DEFAULT_FIRST_INTERVAL_SECONDS = 600.0
# The interval file is read again at most this often: checkpoint_due stays one clock read per step.
INTERVAL_REREAD_SECONDS = 1.0


class IntervalFile:
    """When the next checkpoint is due, time-based: the agent's interval (seconds) after the last save.

    The agent rewrites the file (one number of seconds, replaced atomically) whenever its measurement changes
    the interval; this reads it at most every :data:`INTERVAL_REREAD_SECONDS`, so asking each step is cheap.

    Parameters
    ----------
    path
        The agent's interval file (``SPOTRUN_CHECKPOINT_INTERVAL_FILE``).
    clock
        Monotonic seconds (``time.monotonic``; tests inject their own).
    """

    def __init__(self, path: Path, clock: Callable[[], float]):
        self.path = path
        self.clock = clock
        self.interval_seconds = DEFAULT_FIRST_INTERVAL_SECONDS
        self.saved_at = clock()  # the run's start counts as the last save: nothing before it is unsaved
        self.read_at = float("-inf")

    def due(self) -> bool:
        """True once the interval has passed since the last save (or the start)."""
        now = self.clock()
        if now - self.read_at >= INTERVAL_REREAD_SECONDS:
            self.read_at = now
            self._read()
        return now - self.saved_at >= self.interval_seconds

    def saved(self) -> None:
        """A checkpoint was just saved: the next one is due an interval from now."""
        self.saved_at = self.clock()

    def _read(self) -> None:
        try:
            value = float(self.path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return  # not written yet, or garbled: keep the interval in force
        if value > 0 and value != float("inf"):
            self.interval_seconds = value


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


# Between a temporary's final name and its owner (pid and a random part): `.step-N.tmp-<pid>-<hex>`.
_TEMP_MARK = ".tmp-"


def write_directory(final: Path, writer: Callable[[Path], object]) -> None:
    """Create the directory ``final`` atomically: ``writer`` fills a temporary one, flushed, then renamed.

    The agent uploads only directories with a final name, so it never sees a half-written one. Temporaries that a
    process killed in the middle of a save left in ``final.parent`` are removed first.

    Parameters
    ----------
    final
        The directory to create; it must not exist.
    writer
        Called with the (empty) temporary directory to write the files into.
    """
    parent = final.parent
    parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(parent)
    temporary = parent / f"{layout.TEMP_PREFIX}{final.name}{_TEMP_MARK}{os.getpid()}-{uuid.uuid4().hex}"
    temporary.mkdir()
    try:
        writer(temporary)
        fsync_tree(temporary)
        temporary.rename(final)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    fsync_directory(parent)


def replace_path(final: Path, writer: Callable[[Path], object]) -> Path:
    """Write the file or directory ``final`` atomically, replacing what was there.

    Parameters
    ----------
    final
        The path to write.
    writer
        Called with a temporary path that keeps ``final``'s name at its end (so ``np.save`` does not append
        another suffix); it writes a file or creates a directory there.

    Returns
    -------
    Path
        ``final``.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = final.parent / f"{layout.TEMP_PREFIX}{uuid.uuid4().hex}{_TEMP_MARK}{final.name}"
    try:
        writer(temporary)
        if not temporary.exists():
            raise FileNotFoundError(f"the model writer wrote nothing at {temporary}")
        if final.is_dir():
            shutil.rmtree(final)
        temporary.replace(final)
    except BaseException:
        remove_path(temporary)
        raise
    return final


def _remove_stale_temporaries(directory: Path) -> None:
    # Left behind by a process killed in the middle of a save; never by a live one of ours.
    own = f"{_TEMP_MARK}{os.getpid()}-"
    for entry in directory.iterdir():
        if entry.name.startswith(layout.TEMP_PREFIX) and _TEMP_MARK in entry.name and own not in entry.name:
            shutil.rmtree(entry, ignore_errors=True)

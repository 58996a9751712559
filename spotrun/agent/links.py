"""No reading or writing through a symbolic link in a job's directories.

The training command writes the job's checkpoint, output and log directories, and an earlier run of it (a
retried step, or the attempt before a replacement instance) may have left links in its data directory. A link
there is never followed by the agent: an upload would otherwise send the link's target (``/etc/shadow``, another
job's files, the instance's credentials cache) to S3 as if the job had written it, and a re-stage would write
wherever the link points. Both directions refuse with :class:`LinkError`, which names the link.

Checking a path and then opening it leaves a window in which the training command could swap a file for a
link: files are therefore opened with ``O_NOFOLLOW`` and read (hashed, uploaded) through that one descriptor.
"""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


class LinkError(Exception):
    """A symbolic link (or another non-regular entry) where the agent reads or writes a job's files."""


def _describe(path: Path) -> str:
    try:
        return f"{path} is a symbolic link (to {path.readlink()})"
    except OSError:
        return f"{path} is a symbolic link"


def regular_files(directory: Path) -> list[tuple[str, Path]]:
    """Every regular file under ``directory`` as ``(relative posix path, path)``, sorted; no link followed.

    Parameters
    ----------
    directory
        A job's directory. A missing one holds no files.

    Returns
    -------
    list[tuple[str, Path]]
        The files. Other entries that are not links (a FIFO, a socket) are left out: they hold no content.

    Raises
    ------
    LinkError
        When ``directory`` itself, or any file or directory below it, is a symbolic link.
    """
    if directory.is_symlink():
        raise LinkError(_describe(directory))
    found = []
    # os.walk lists a link to a directory among the directories but never descends into it (followlinks off).
    for current, directories, files in os.walk(directory):
        for name in (*directories, *files):
            path = Path(current, name)
            if path.is_symlink():
                raise LinkError(_describe(path))
        for name in files:
            path = Path(current, name)
            if stat.S_ISREG(path.lstat().st_mode):
                found.append((path.relative_to(directory).as_posix(), path))
    return sorted(found)


@contextmanager
def open_regular(path: Path) -> Iterator[BinaryIO]:
    """Open a regular file for reading without following a link, even one swapped in after a check.

    Raises
    ------
    LinkError
        When ``path`` is a symbolic link or not a regular file.
    FileNotFoundError
        When it does not exist.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if path.is_symlink():
            raise LinkError(_describe(path)) from exc
        raise
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise LinkError(f"{path} is not a regular file")
        yield handle


def real_directories(root: Path, directory: Path) -> None:
    """Make ``directory`` (under ``root``) and its missing parents, refusing to pass through a link.

    Parameters
    ----------
    root
        A directory the agent created itself (it is checked too: it must not be a link).
    directory
        ``root`` or a path below it.

    Raises
    ------
    LinkError
        When ``root`` or a component between it and ``directory`` is a symbolic link or not a directory, or
        ``directory`` is not below ``root``.
    """
    try:
        relative = directory.relative_to(root)
    except ValueError:
        raise LinkError(f"{directory} is not inside {root}") from None
    if ".." in relative.parts:
        raise LinkError(f"{directory} leaves {root}")
    for depth in range(len(relative.parts) + 1):
        current = root.joinpath(*relative.parts[:depth])
        try:
            mode = current.lstat().st_mode
        except FileNotFoundError:
            current.mkdir(mode=0o700, exist_ok=True)
            mode = current.lstat().st_mode
        if stat.S_ISLNK(mode):
            raise LinkError(f"{_describe(current)}: refusing to write through it")
        if not stat.S_ISDIR(mode):
            raise LinkError(f"{current} is not a directory")


def open_append(path: Path) -> BinaryIO:
    """Open (creating it, mode 0600) a file to append to, refusing a link in its place instead of writing
    through it.

    Raises
    ------
    LinkError
        When ``path`` is a symbolic link.
    """
    try:
        # Readable too: the agent's notes check whether the command's last output ended its line.
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        if path.is_symlink():
            raise LinkError(f"{_describe(path)}: refusing to write through it") from exc
        raise
    return os.fdopen(descriptor, "ab")


def replace_file(root: Path, path: Path, data: bytes) -> None:
    """Write ``path`` (under ``root``) afresh: a new file renamed into place, so a link there is replaced,
    never written through, and no directory on the way may be a link.

    Raises
    ------
    LinkError
        When a directory between ``root`` and ``path`` is a symbolic link.
    """
    real_directories(root, path.parent)
    partial = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.part"
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        partial.replace(path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise

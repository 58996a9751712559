"""Pack a local directory (``training.workdir``, ``spotrun submit --workdir``) into a deterministic code archive.

What goes in is what git would track: every ``.gitignore`` in the tree applies to its own directory and below,
as git reads them (https://git-scm.com/docs/gitignore), and a ``.spotrunignore`` (same syntax) beside any of
them adds to it, its lines read after the ``.gitignore``'s so that they win (a ``!pattern`` there re-includes).
``.git/`` is always left out. Patterns are matched by the ``pathspec`` library's git-compatible matcher.

The archive is a gzip tar whose bytes depend only on the files' paths, contents and executable bits: entries
sorted, mtime 0, uid/gid 0 without names, modes 0644/0755, and a gzip header with mtime 0 and no file name. So
an unchanged directory gives the same SHA-256, and its upload (``code/<sha256>.tar.gz``) is not repeated.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

import pathspec

IGNORE_FILES: Final = (".gitignore", ".spotrunignore")
ALWAYS_LEFT_OUT: Final = frozenset({".git"})
# Unpacked bytes a workdir may hold by default: code and small assets, not data sets (those go in data.inputs)
# nor virtual environments. `spotrun submit --max-workdir-mib` raises it.
DEFAULT_MAX_BYTES: Final = 100 * 1024 * 1024
LARGEST_NAMED: Final = 5
_CHUNK: Final = 1024 * 1024


class WorkdirError(ValueError):
    """The directory cannot be packed: missing, too large, or holding a link that leaves it."""


@dataclass(frozen=True)
class Entry:
    """One member of the archive: a directory, a regular file or a link staying inside the directory."""

    name: str  # posix path relative to the workdir
    path: Path
    kind: str  # "dir", "file" or "link"
    size: int = 0
    executable: bool = False
    link_target: str = ""


@dataclass(frozen=True)
class PackedWorkdir:
    """A packed directory: the archive file (removed when the :func:`packed` block ends) and its identity."""

    path: Path
    sha256: str
    size: int
    files: int
    unpacked_bytes: int


def _spec_of(directory: Path) -> pathspec.GitIgnoreSpec | None:
    lines: list[str] = []
    for name in IGNORE_FILES:
        candidate = directory / name
        if candidate.is_file() and not candidate.is_symlink():
            lines += candidate.read_text(encoding="utf-8", errors="replace").splitlines()
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


def _ignored(specs: list[tuple[PurePosixPath, pathspec.GitIgnoreSpec]], name: str, is_dir: bool) -> bool:
    """Whether ``name`` is ignored by the rules of its ancestors; a deeper file's rules decide over a higher one's."""
    path = PurePosixPath(name)
    verdict = False
    for base, spec in specs:
        inner = path if base == PurePosixPath(".") else path.relative_to(base)
        relative = inner.as_posix() + ("/" if is_dir else "")
        result = spec.check_file(relative)
        if result.include is not None:
            verdict = bool(result.include)
    return verdict


def _link_entry(root: Path, path: Path, name: str) -> Entry:
    target = Path(os.path.realpath(path))
    if target != root and root not in target.parents:
        raise WorkdirError(
            f"{name} is a symbolic link to {path.readlink()}, outside {root}: the job could not follow it; "
            "copy what it points to into the directory, or ignore the link in .spotrunignore"
        )
    # Relative, so that the link still points inside once extracted elsewhere.
    return Entry(name, path, "link", link_target=os.path.relpath(target, path.parent))


def list_entries(root: Path) -> list[Entry]:
    """Every entry of the archive of ``root``, sorted by path, ignored ones left out.

    Parameters
    ----------
    root
        The directory.

    Returns
    -------
    list[Entry]
        Directories, files and inner links.

    Raises
    ------
    WorkdirError
        When ``root`` is not a directory, or holds a link leaving it or something neither file nor directory.
    """
    if not root.is_dir():
        raise WorkdirError(f"workdir {root} is not a directory")
    root = Path(os.path.realpath(root))
    entries: list[Entry] = []
    # (directory relative to root, its rules), outermost first, for the directory being walked and its ancestors.
    rules: dict[str, list[tuple[PurePosixPath, pathspec.GitIgnoreSpec]]] = {}
    for current, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(current)
        relative = here.relative_to(root).as_posix()
        parent_rules = rules.get(PurePosixPath(relative).parent.as_posix(), []) if relative != "." else []
        spec = _spec_of(here)
        specs = [*parent_rules, (PurePosixPath(relative), spec)] if spec else parent_rules
        rules[relative] = specs
        kept_dirs = []
        for name in sorted(dirnames + filenames):
            path = here / name
            member = name if relative == "." else f"{relative}/{name}"
            if name in ALWAYS_LEFT_OUT and path.is_dir():
                continue
            info = path.lstat()
            is_dir = stat.S_ISDIR(info.st_mode)
            if _ignored(specs, member, is_dir):
                continue
            if stat.S_ISLNK(info.st_mode):
                entries.append(_link_entry(root, path, member))
            elif is_dir:
                entries.append(Entry(member, path, "dir"))
                kept_dirs.append(name)
            elif stat.S_ISREG(info.st_mode):
                executable = bool(info.st_mode & stat.S_IXUSR)
                entries.append(Entry(member, path, "file", size=info.st_size, executable=executable))
            else:
                raise WorkdirError(
                    f"{member} is neither a file, a directory nor a link; ignore it in .spotrunignore"
                )
        dirnames[:] = kept_dirs  # ignored directories are not walked: git never re-includes below them
    return sorted(entries, key=lambda entry: entry.name)


def check_size(entries: list[Entry], max_bytes: int, root: Path) -> int:
    """The unpacked bytes of ``entries``; past ``max_bytes``, :class:`WorkdirError` naming the largest files."""
    total = sum(entry.size for entry in entries)
    if total <= max_bytes:
        return total
    largest = sorted((entry for entry in entries if entry.kind == "file"), key=lambda e: (-e.size, e.name))
    named = "".join(f"\n  {_mib(entry.size):>10}  {entry.name}" for entry in largest[:LARGEST_NAMED])
    raise WorkdirError(
        f"workdir {root} holds {_mib(total)} to upload, over the limit of {_mib(max_bytes)}; the largest files:"
        f"{named}\nleave out what the job does not need in .spotrunignore (data belongs in data.inputs), or raise "
        "the limit with --max-workdir-mib"
    )


def _mib(size: float) -> str:
    """``size`` bytes for people: B, KiB, MiB or GiB."""
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _tar_info(entry: Entry) -> tarfile.TarInfo:
    # A fresh TarInfo has mtime 0, uid and gid 0 and no owner names: of the file's own metadata only its
    # executable bit goes in (as the mode below).
    info = tarfile.TarInfo(entry.name)
    if entry.kind == "dir":
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif entry.kind == "link":
        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, entry.link_target
    else:
        info.size, info.mode = entry.size, 0o755 if entry.executable else 0o644
    return info


def write_archive(entries: list[Entry], out: io.BufferedIOBase) -> None:
    """Write the deterministic gzip tar of ``entries`` to ``out``."""
    # No file name and mtime 0 in the gzip header (RFC 1952): the same entries, the same bytes.
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for entry in entries:
            info = _tar_info(entry)
            if entry.kind != "file":
                tar.addfile(info)
                continue
            with entry.path.open("rb") as source:
                tar.addfile(info, source)


@contextmanager
def packed(root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> Iterator[PackedWorkdir]:
    """Pack ``root`` into a temporary archive, removed when the block ends.

    Parameters
    ----------
    root
        The directory to pack.
    max_bytes
        The most unpacked bytes accepted.

    Yields
    ------
    PackedWorkdir
        The archive and its SHA-256.

    Raises
    ------
    WorkdirError
        When the directory cannot be packed (see :func:`list_entries`, :func:`check_size`).
    """
    entries = list_entries(root)
    unpacked = check_size(entries, max_bytes, root)
    with tempfile.TemporaryDirectory(prefix="spotrun-workdir-") as scratch:
        archive = Path(scratch) / "code.tar.gz"
        with archive.open("wb") as out:
            write_archive(entries, out)
        digest = hashlib.sha256()
        with archive.open("rb") as written:
            while chunk := written.read(_CHUNK):
                digest.update(chunk)
        yield PackedWorkdir(
            path=archive,
            sha256=digest.hexdigest(),
            size=archive.stat().st_size,
            files=sum(1 for entry in entries if entry.kind == "file"),
            unpacked_bytes=unpacked,
        )

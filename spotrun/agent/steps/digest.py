"""The model digest reported with a successful training: one SHA-256 for a file or a whole directory.

A file's digest is the SHA-256 of its bytes. A directory's is the SHA-256 of the sorted lines
``"<relative posix path>\\0<sha256 hex of the file>\\n"``, one per regular file below it, so it depends on the
names and contents of the files and on nothing else (not on mtimes, nor on the order the disk lists them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from spotrun.agent.checkpoint_store import file_sha256

__all__ = ["file_sha256", "model_digest", "tree_digest"]


def tree_digest(files: Mapping[str, str]) -> str:
    """Digest of a directory from its files' digests.

    Parameters
    ----------
    files
        Relative posix path -> SHA-256 hex of the file.

    Returns
    -------
    str
        SHA-256 hex over the sorted ``"relpath\\0sha256\\n"`` lines.
    """
    digest = hashlib.sha256()
    for relative in sorted(files):
        digest.update(f"{relative}\0{files[relative]}\n".encode())
    return digest.hexdigest()


def model_digest(path: Path) -> str:
    """Digest of a model that is a file or a directory (see the module's docstring).

    Parameters
    ----------
    path
        The model file or directory.

    Returns
    -------
    str
        SHA-256 hex.

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    """
    if path.is_file():
        return file_sha256(path)
    if not path.is_dir():
        raise FileNotFoundError(path)
    files = {p.relative_to(path).as_posix(): file_sha256(p) for p in path.rglob("*") if p.is_file()}
    return tree_digest(files)

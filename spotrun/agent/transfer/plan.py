"""What staging copies: the items, their destinations under a root, and the errors a copy can end with.

The planner side of :mod:`spotrun.agent.transfer.download` (the transfer engine): pure but for the listing, so the code
archive, the stage step and checkpoint restores plan with it and hand the items to the engine.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal, Protocol

from spotrun.model.manifest.schema import split_s3_uri

Algorithm = Literal["sha256", "crc32", "crc64nvme", "md5", "size"]


class S3Reader(Protocol):
    """The part of a boto3 S3 client that staging uses."""

    def list_objects_v2(self, **kwargs: Any) -> dict[str, Any]: ...

    def get_object(self, **kwargs: Any) -> dict[str, Any]: ...

    def head_object(self, **kwargs: Any) -> dict[str, Any]: ...


class StagingError(Exception):
    """Staging could not complete."""


class VerificationError(StagingError):
    """A downloaded file does not match what S3 says it should be."""


class LinkStagingError(StagingError):
    """A file would be written through a symbolic link (or out of its root): never retried."""


@dataclass(frozen=True)
class StageItem:
    """One object to copy.

    Parameters
    ----------
    bucket, key
        The object.
    destination
        The local file to create.
    sha256
        Expected SHA-256 (hex) known from elsewhere, checked in addition to what S3 reports.
    size
        The object's size when known (a listing, a commit marker): it chooses between one GET and ranged GETs
        without asking S3 first. None: S3 is asked (``HeadObject``).
    """

    bucket: str
    key: str
    destination: Path
    sha256: str | None = None
    size: int | None = None


@dataclass(frozen=True)
class StagedFile:
    """A file copied and verified."""

    item: StageItem
    size: int
    algorithm: Algorithm
    attempts: int
    requests: int = 1  # GETs of the last attempt (ranged GETs of a large object: one per range)


@dataclass(frozen=True)
class StagingReport:
    """What a call of :func:`spotrun.agent.transfer.download.stage` did."""

    files: int
    bytes: int
    seconds: float


def iter_objects(s3: S3Reader, bucket: str, prefix: str) -> Iterator[tuple[str, int]]:
    """Yield ``(key, size)`` of every object under ``prefix``, following continuation tokens."""
    arguments: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    while True:
        page = s3.list_objects_v2(**arguments)
        for entry in page.get("Contents", []):
            yield entry["Key"], int(entry["Size"])
        if not page.get("IsTruncated"):
            return
        arguments["ContinuationToken"] = page["NextContinuationToken"]


def relative_destination(key: str, prefix: str, destination_dir: Path) -> Path:
    """Local path of ``key`` staged from ``prefix`` into ``destination_dir``, keeping its relative path.

    Parameters
    ----------
    key
        The object's key, which starts with ``prefix``.
    prefix
        The staged prefix (empty, or ending with ``/``).
    destination_dir
        The local directory the prefix maps to.

    Returns
    -------
    Path
        ``destination_dir / <key without prefix>``.

    Raises
    ------
    StagingError
        When the relative part would leave ``destination_dir`` (``..``) or is empty.
    """
    relative = PurePosixPath(key[len(prefix) :])
    if not relative.parts or relative.is_absolute() or any(part in ("..", ".") for part in relative.parts):
        raise StagingError(
            f"refusing to stage key {key!r}: its path under {prefix!r} is not a plain relative path"
        )
    return destination_dir.joinpath(*relative.parts)


def plan_input(s3: S3Reader, source: str, destination: Path) -> list[StageItem]:
    """List what staging ``source`` into ``destination`` copies.

    Parameters
    ----------
    s3
        The S3 client.
    source
        ``s3://bucket/prefix/`` (ends with ``/``: every object below it, relative paths kept, "folder" marker
        objects skipped) or ``s3://bucket/key`` (one object).
    destination
        For a prefix, the directory it maps to. For one object, the file to create, or a directory (existing,
        or the staging root itself) that receives the object under its own name.

    Returns
    -------
    list[StageItem]
        The files to copy (with their listed sizes for a prefix).

    Raises
    ------
    StagingError
        When a prefix holds no object (almost always a typo in the manifest).
    """
    bucket, key = split_s3_uri(source)
    if key == "" or key.endswith("/"):
        items = [
            StageItem(bucket, object_key, relative_destination(object_key, key, destination), size=size)
            for object_key, size in iter_objects(s3, bucket, key)
            if not object_key.endswith("/")
        ]
        if not items:
            raise StagingError(f"no object under {source}")
        return items
    if destination.is_dir():
        destination = destination / PurePosixPath(key).name
    return [StageItem(bucket, key, destination)]

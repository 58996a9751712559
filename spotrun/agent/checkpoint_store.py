"""Checkpoints in S3: upload, commit, find the latest committed one, restore it, prune old ones.

A checkpoint is the sub-prefix ``jobs/<job>/checkpoints/step-<012d>/`` holding the files of the local
checkpoint directory of that step. It counts only once its commit marker (``_COMMITTED.json``) exists, and the
marker is written after every file, so a checkpoint cut short by a dying instance is never resumed. The marker
lists each file with its size and SHA-256: a restore copies exactly those files and checks each digest, so
stray objects under the prefix (from an earlier, interrupted upload of the same step) cannot leak into it.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from pydantic import BaseModel

from spotrun.agent.links import LinkError, open_regular, real_directories, regular_files
from spotrun.agent.transfer.download import (
    DEFAULT_WORKERS,
    DirectGetter,
    LinkStagingError,
    StageItem,
    iter_objects,
    stage,
)
from spotrun.agent.transfer.upload import PartUploader, upload_file
from spotrun.model import layout
from spotrun.model.agent_protocol.checkpoints import (
    CheckpointFile,
    CommitMarker,
    CommittedCheckpoint,
    RemoteCheckpoint,
    group_checkpoint_keys,
    select_prunable,
)

logger = logging.getLogger(__name__)

_DELETE_BATCH = 1000


class S3Client(Protocol):
    """The part of a boto3 S3 client that checkpoints use."""

    def list_objects_v2(self, **kwargs: Any) -> dict[str, Any]: ...

    def get_object(self, **kwargs: Any) -> dict[str, Any]: ...

    def put_object(self, **kwargs: Any) -> dict[str, Any]: ...

    def delete_objects(self, **kwargs: Any) -> dict[str, Any]: ...

    def create_multipart_upload(self, **kwargs: Any) -> dict[str, Any]: ...

    def upload_part(self, **kwargs: Any) -> dict[str, Any]: ...

    def complete_multipart_upload(self, **kwargs: Any) -> dict[str, Any]: ...

    def abort_multipart_upload(self, **kwargs: Any) -> dict[str, Any]: ...

    def head_object(self, **kwargs: Any) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RestoredCheckpoint:
    """A committed checkpoint copied into the local checkpoint directory."""

    step: int
    prefix: str
    path: Path
    files: int
    bytes: int


class CheckpointVanishedError(RuntimeError):
    """A local checkpoint was deleted while it was being uploaded (a newer one replaced it)."""


def local_files(directory: Path) -> list[tuple[str, Path]]:
    """Regular files under a checkpoint directory as ``(relative posix path, path)``, sorted.

    Raises :class:`~spotrun.agent.links.LinkError` on a symbolic link anywhere in it (see
    :func:`~spotrun.agent.links.regular_files`).
    """
    return regular_files(directory)


def handle_sha256(handle: Any) -> str:
    """SHA-256 (hex) of what is left to read in an open binary file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    while chunk := handle.read(1024 * 1024):
        digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of a regular file's bytes; a symbolic link is refused, not followed."""
    with open_regular(path) as handle:
        return handle_sha256(handle)


def upload_regular(
    s3: Any, path: Path, bucket: str, key: str, extra: dict[str, str], parts: PartUploader | None = None
) -> tuple[int, str]:
    """Upload one regular file, never a link's target; returns its size and SHA-256.

    :func:`spotrun.agent.transfer.upload.upload_file`: one read of the file feeds its SHA-256 and S3's checksum.

    Raises
    ------
    LinkError
        When ``path`` is a symbolic link or not a regular file.
    """
    return upload_file(s3, path, bucket, key, extra, parts=parts)


# -- S3 --------------------------------------------------------------------------------


def list_checkpoints(s3: S3Client, bucket: str, job_id: str) -> list[RemoteCheckpoint]:
    """Every checkpoint of a job in S3, committed or not, oldest first."""
    keys = (key for key, _ in iter_objects(s3, bucket, layout.checkpoints_prefix(job_id)))
    return group_checkpoint_keys(job_id, keys)


def latest_committed(s3: S3Client, bucket: str, job_id: str) -> CommittedCheckpoint | None:
    """The newest checkpoint whose commit marker exists, or None; uncommitted ones are never returned."""
    committed = [c for c in list_checkpoints(s3, bucket, job_id) if c.committed]
    if not committed:
        return None
    return CommittedCheckpoint(step=committed[-1].step, prefix=committed[-1].prefix)


def read_marker(s3: S3Client, bucket: str, job_id: str, step: int) -> CommitMarker:
    """Read and validate the commit marker of one checkpoint."""
    response = s3.get_object(Bucket=bucket, Key=layout.commit_marker_key(job_id, step))
    return CommitMarker.model_validate_json(response["Body"].read())


def _upload_one(
    s3: S3Client, bucket: str, prefix: str, relative: str, path: Path, parts: PartUploader
) -> CheckpointFile:
    try:
        # S3 checks and keeps a checksum too (SHA-256, or CRC-32 for multipart), so staging can verify the
        # object without the marker.
        size, sha256 = upload_regular(s3, path, bucket, prefix + relative, {}, parts)
    except FileNotFoundError as exc:
        raise CheckpointVanishedError(str(path)) from exc
    return CheckpointFile(path=relative, size=size, sha256=sha256)


def upload_files(
    s3: S3Client, bucket: str, prefix: str, directory: Path, *, max_workers: int = DEFAULT_WORKERS
) -> list[CheckpointFile]:
    """Upload every file of a local checkpoint directory under ``prefix``, at once up to ``max_workers``.

    Returns
    -------
    list[CheckpointFile]
        Each file with its size and SHA-256, in the directory's sorted order.

    Raises
    ------
    CheckpointVanishedError
        When the directory or a file disappeared during the upload.
    LinkError
        When the directory is, or holds, a symbolic link.
    """
    files = local_files(directory)
    if not files and not directory.is_dir():
        raise CheckpointVanishedError(str(directory))
    with (
        PartUploader() as parts,
        ThreadPoolExecutor(max_workers=max(1, max_workers), thread_name_prefix="ckpt-up") as pool,
    ):
        futures = [
            pool.submit(_upload_one, s3, bucket, prefix, relative, path, parts) for relative, path in files
        ]
        return [future.result() for future in futures]


def commit_time() -> str:
    """Now, as a commit marker's ``committed_at`` states it (UTC, whole seconds, ``Z``)."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def commit_marker(
    job_id: str, step: int, files: list[CheckpointFile], *, attempt: int | None, nodes: int = 1
) -> CommitMarker:
    """The commit marker of a checkpoint of ``files``, committed now (by ``nodes`` nodes' parts)."""
    return CommitMarker(
        job_id=job_id,
        step=step,
        attempt=attempt,
        files=files,
        bytes=sum(f.size for f in files),
        committed_at=commit_time(),
        nodes=nodes,
    )


def put_marker(s3: S3Client, bucket: str, key: str, marker: BaseModel, **conditions: str) -> None:
    """Write a checkpoint marker (commit or part) as JSON, with its SHA-256 checksum.

    ``conditions`` are S3's conditional-write parameters (``IfNoneMatch="*"``: only if no object is there).
    """
    s3.put_object(
        Bucket=bucket,
        Key=key,
        Body=marker.model_dump_json(indent=1).encode(),
        ContentType="application/json",
        ChecksumAlgorithm="SHA256",
        **conditions,
    )


def upload_checkpoint(
    s3: S3Client,
    bucket: str,
    job_id: str,
    step: int,
    directory: Path,
    *,
    attempt: int | None = None,
    max_workers: int = DEFAULT_WORKERS,
) -> CommittedCheckpoint:
    """Upload a local checkpoint directory, then write its commit marker.

    Parameters
    ----------
    s3
        The S3 client.
    bucket
        The jobs bucket.
    job_id
        The job.
    step
        The checkpoint's step.
    directory
        The complete local checkpoint directory.
    attempt
        The attempt that produced it, recorded in the marker.
    max_workers
        Files uploaded at once.

    Returns
    -------
    CommittedCheckpoint
        The committed checkpoint.

    Raises
    ------
    CheckpointVanishedError
        When a file disappeared during the upload; no marker is written.
    LinkError
        When the directory is, or holds, a symbolic link: the checkpoint is refused whole (no marker), since
        uploading the link's target would commit content the job never wrote, and leaving the file out would
        commit a checkpoint that is not the one training saved.
    """
    prefix = layout.checkpoint_prefix(job_id, step)
    marker_key = layout.commit_marker_key(job_id, step)
    # Re-uploading a committed step: withdraw its marker first, so the prefix never looks committed while it
    # mixes old and new files. (Listing first avoids a delete marker per upload in a versioned bucket.)
    if any(key == marker_key for key, _ in iter_objects(s3, bucket, prefix)):
        _delete_keys(s3, bucket, [marker_key])
    listed = upload_files(s3, bucket, prefix, directory, max_workers=max_workers)
    marker = commit_marker(job_id, step, listed, attempt=attempt)
    put_marker(s3, bucket, marker_key, marker)
    logger.info(
        "committed checkpoint step %d (%d files, %d bytes) at %s", step, len(listed), marker.bytes, prefix
    )
    return CommittedCheckpoint(step=step, prefix=prefix)


def download_checkpoint(
    s3: S3Client,
    bucket: str,
    job_id: str,
    step: int,
    checkpoint_dir: Path,
    *,
    max_workers: int = DEFAULT_WORKERS,
    direct: DirectGetter | None = None,
) -> RestoredCheckpoint:
    """Copy a committed checkpoint into ``checkpoint_dir / step-<step>``, every file verified.

    The files land in a hidden temporary directory that is renamed into place at the end, so the training
    script (and the agent's upload loop) never see a partial restore.

    Parameters
    ----------
    s3
        The S3 client.
    bucket
        The jobs bucket.
    job_id
        The job.
    step
        A committed checkpoint's step.
    checkpoint_dir
        The local checkpoint directory.
    max_workers
        Files copied at once.
    direct
        Makes the GETs of the files under the ranged threshold (:func:`spotrun.agent.transfer.download.stage`).

    Returns
    -------
    RestoredCheckpoint
        Where it went and how much was copied.
    """
    marker = read_marker(s3, bucket, job_id, step)
    prefix = layout.checkpoint_prefix(job_id, step)
    final = checkpoint_dir / layout.checkpoint_name(step)
    temporary = checkpoint_dir / f"{layout.TEMP_PREFIX}{final.name}.restore-{uuid.uuid4().hex}"
    items = []
    for entry in marker.files:
        relative = PurePosixPath(entry.path)
        if relative.is_absolute() or ".." in relative.parts:
            raise ValueError(f"checkpoint step {step}: marker lists an unsafe path {entry.path!r}")
        items.append(
            StageItem(
                bucket, prefix + entry.path, temporary.joinpath(*relative.parts), entry.sha256, entry.size
            )
        )
    try:
        real_directories(checkpoint_dir, checkpoint_dir)
    except LinkError as exc:
        raise LinkStagingError(f"checkpoint step {step}: cannot restore: {exc}") from None
    temporary.mkdir(mode=0o700)
    try:
        report = stage(s3, items, root=temporary, max_workers=max_workers, direct=direct)
        if final.is_symlink():
            final.unlink()  # a link left in its place is replaced, never written through or followed
        elif final.exists():
            shutil.rmtree(final)
        temporary.rename(final)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return RestoredCheckpoint(step=step, prefix=prefix, path=final, files=report.files, bytes=report.bytes)


def _delete_keys(s3: S3Client, bucket: str, keys: list[str]) -> None:
    for start in range(0, len(keys), _DELETE_BATCH):
        batch = [{"Key": key} for key in keys[start : start + _DELETE_BATCH]]
        response = s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
        if response.get("Errors"):
            first = response["Errors"][0]
            raise RuntimeError(
                f"could not delete {first.get('Key')}: {first.get('Code')} {first.get('Message')}"
            )


def prune_checkpoints(s3: S3Client, bucket: str, job_id: str, keep_last: int) -> list[int]:
    """Delete committed checkpoints beyond the newest ``keep_last`` (and older uncommitted leftovers).

    Markers go first: a checkpoint half deleted is then merely uncommitted, never a corrupt "committed" one.

    Parameters
    ----------
    s3
        The S3 client.
    bucket
        The jobs bucket.
    job_id
        The job.
    keep_last
        Committed checkpoints to keep.

    Returns
    -------
    list[int]
        Steps of the checkpoints deleted.
    """
    doomed = select_prunable(list_checkpoints(s3, bucket, job_id), keep_last)
    if not doomed:
        return []
    _delete_keys(s3, bucket, [layout.commit_marker_key(job_id, c.step) for c in doomed if c.committed])
    marker_keys = {layout.commit_marker_key(job_id, c.step) for c in doomed}
    _delete_keys(s3, bucket, [key for c in doomed for key in c.keys if key not in marker_keys])
    return [c.step for c in doomed]

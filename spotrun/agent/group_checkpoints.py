"""A multi-node job's checkpoints: each node uploads its part, and the group's checkpoint is committed once.

Each node's agent uploads what its local checkpoint directory holds for a step under the step's prefix, then
its part marker (:class:`~spotrun.model.agent_protocol.checkpoints.PartMarker`, listing those files). Any node
that finds every node's part of its attempt there writes the commit marker, listing every file
(:func:`~spotrun.model.agent_protocol.checkpoints.group_commit_files`). The marker is written with
``If-None-Match: *``, so of two nodes that find the parts complete at once only one writes it, and the other
reads S3's ``412 Precondition Failed`` as "committed" (https://docs.aws.amazon.com/AmazonS3/latest/userguide/
conditional-writes.html). S3 lists what was written before the list began (strong read-after-write consistency),
so of the last two nodes to upload, at least one sees the other's part: a complete group is always committed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from spotrun.agent.checkpoint_store import S3Client, commit_marker, local_files, put_marker, upload_files
from spotrun.agent.transfer.download import DEFAULT_WORKERS, iter_objects
from spotrun.model import layout
from spotrun.model.agent_protocol.checkpoints import (
    CommittedCheckpoint,
    PartConflictError,
    PartMarker,
    group_commit_files,
    missing_parts,
)

logger = logging.getLogger(__name__)

# S3's answers to a conditional write that lost: the object exists (412), or a concurrent write of it is under
# way (409, which AWS says to retry: the next sync does).
_LOST_RACE = {"PreconditionFailed", "ConditionalRequestConflict"}


class ReservedPathError(ValueError):
    """A local checkpoint holds a file named like one of the markers, which its upload would overwrite."""


def _committed(s3: S3Client, bucket: str, job_id: str, step: int) -> bool:
    marker = layout.commit_marker_key(job_id, step)
    return any(key == marker for key, _ in iter_objects(s3, bucket, marker))


def upload_part(
    s3: S3Client,
    bucket: str,
    job_id: str,
    step: int,
    directory: Path,
    *,
    node: int,
    nodes: int,
    attempt: int,
    max_workers: int = DEFAULT_WORKERS,
) -> PartMarker | None:
    """Upload this node's files of a checkpoint, then its part marker.

    Parameters
    ----------
    s3, bucket, job_id, step
        The S3 client, the jobs bucket, the job, and the checkpoint's step.
    directory
        This node's complete local checkpoint directory of ``step``.
    node, nodes
        This node's place in the group, and the group's size.
    attempt
        The attempt (the group's run) that produced it.
    max_workers
        Files uploaded at once.

    Returns
    -------
    PartMarker or None
        The part uploaded; None when the step is already committed (a group checkpoint is never reopened: the
        other nodes count on its files as they are).

    Raises
    ------
    CheckpointVanishedError
        When a file disappeared during the upload; no part marker is written.
    LinkError
        When the directory holds a symbolic link (as :func:`~spotrun.agent.checkpoint_store.upload_checkpoint`).
    ReservedPathError
        When a file is named like a marker.
    """
    if _committed(s3, bucket, job_id, step):
        return None
    for relative, _ in local_files(directory):
        if relative == layout.COMMIT_MARKER or relative.split("/")[0] == layout.PART_MARKERS:
            raise ReservedPathError(f"checkpoint step {step}: {relative!r} is a name spotrun's markers use")
    prefix = layout.checkpoint_prefix(job_id, step)
    files = upload_files(s3, bucket, prefix, directory, max_workers=max_workers)
    part = PartMarker(
        job_id=job_id,
        step=step,
        node=node,
        nodes=nodes,
        attempt=attempt,
        files=files,
        bytes=sum(f.size for f in files),
    )
    put_marker(s3, bucket, layout.part_marker_key(job_id, step, node), part)
    logger.info("uploaded node %d's part of checkpoint step %d (%d files)", node, step, len(files))
    return part


def read_parts(s3: S3Client, bucket: str, job_id: str, step: int) -> dict[int, PartMarker]:
    """The part markers of a checkpoint, by node (an unreadable one is left out: that node's part is missing)."""
    parts: dict[int, PartMarker] = {}
    markers = layout.checkpoint_prefix(job_id, step) + layout.PART_MARKERS + "/"
    for key, _ in iter_objects(s3, bucket, markers):
        try:
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            part = PartMarker.model_validate_json(body)
        except (ClientError, ValueError) as exc:
            logger.warning("part marker %s unreadable: %s", key, exc)
            continue
        if key == layout.part_marker_key(job_id, step, part.node) and part.step == step:
            parts[part.node] = part
    return parts


def commit_group(
    s3: S3Client, bucket: str, job_id: str, step: int, *, nodes: int, attempt: int
) -> CommittedCheckpoint | None:
    """Write the commit marker of a group checkpoint when every node's part of ``attempt`` is there.

    Parameters
    ----------
    s3, bucket, job_id, step
        As :func:`upload_part`.
    nodes, attempt
        The group's nodes, and the attempt whose parts count.

    Returns
    -------
    CommittedCheckpoint or None
        The checkpoint, committed by this call or before it (by another node); None while a part is missing,
        or when the parts conflict (logged: that step is never committed).
    """
    committed = CommittedCheckpoint(step=step, prefix=layout.checkpoint_prefix(job_id, step))
    if _committed(s3, bucket, job_id, step):
        return committed
    parts = read_parts(s3, bucket, job_id, step)
    missing = missing_parts(parts, nodes, attempt)
    if missing:
        logger.info("checkpoint step %d waits for the parts of nodes %s", step, missing)
        return None
    try:
        files = group_commit_files(parts, nodes, attempt)
    except PartConflictError as exc:
        logger.error("checkpoint step %d not committed: %s", step, exc)
        return None
    marker = commit_marker(job_id, step, files, attempt=attempt, nodes=nodes)
    try:
        put_marker(s3, bucket, layout.commit_marker_key(job_id, step), marker, IfNoneMatch="*")
    except ClientError as exc:
        if _error_code(exc) not in _LOST_RACE:
            raise
        return committed if _committed(s3, bucket, job_id, step) else None
    logger.info("committed group checkpoint step %d (%d nodes, %d files)", step, nodes, len(files))
    return committed


def _error_code(exc: ClientError) -> str:
    error: Any = exc.response.get("Error", {})
    return str(error.get("Code", ""))

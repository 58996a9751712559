"""Uploads the local checkpoints that training writes, as they appear; a group's node uploads its part of each."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from spotrun.agent.checkpoint_store import (
    CheckpointVanishedError,
    CommittedCheckpoint,
    prune_checkpoints,
    upload_checkpoint,
)
from spotrun.agent.group_checkpoints import ReservedPathError, commit_group, upload_part
from spotrun.agent.links import LinkError
from spotrun.model import layout

logger = logging.getLogger(__name__)


class CheckpointSyncer:
    """Commits the newest complete local checkpoint to S3, then prunes old ones.

    Only the newest local checkpoint newer than the last committed one is uploaded: when training writes
    checkpoints faster than they upload, the older ones are superseded before they could be useful, and
    uploading them would delay the one that matters. One call at a time (a lock), because the periodic thread
    and the final sync after the command ends may overlap.

    Parameters
    ----------
    s3
        A boto3 S3 client.
    bucket
        The jobs bucket.
    job_id, attempt
        The job and the attempt (recorded in each commit marker).
    checkpoint_dir
        The local checkpoint directory.
    keep_last
        Committed checkpoints kept in S3.
    committed
        The latest checkpoint already committed (restored by staging), which is not uploaded again.
    node, nodes
        This node's place in a multi-node job's group, and the group's size (0 and 1: one node). A group's node
        uploads its part of each checkpoint (:mod:`spotrun.agent.group_checkpoints`) and keeps asking whether
        the group's parts are complete until the checkpoint is committed, by itself or by another node.
    """

    def __init__(
        self,
        s3: Any,
        bucket: str,
        job_id: str,
        attempt: int,
        checkpoint_dir: Path,
        keep_last: int,
        committed: CommittedCheckpoint | None = None,
        *,
        node: int = 0,
        nodes: int = 1,
    ):
        self.s3 = s3
        self.bucket = bucket
        self.job_id = job_id
        self.attempt = attempt
        self.checkpoint_dir = checkpoint_dir
        self.keep_last = keep_last
        self._committed = committed
        self._refused: set[int] = set()
        self._lock = threading.Lock()
        self._upload_seconds: float | None = None
        self.node = node
        self.nodes = nodes
        # A group's steps whose part this node uploaded, not yet committed.
        self._parts: set[int] = set()

    @property
    def last_committed(self) -> CommittedCheckpoint | None:
        """The newest checkpoint known to be committed."""
        return self._committed

    @property
    def upload_seconds(self) -> float | None:
        """How long the last committed upload took (None before one): what a notice must also leave time for."""
        return self._upload_seconds

    @property
    def awaiting(self) -> list[int]:
        """A group's steps whose part this node uploaded and which are not committed yet, oldest first."""
        return sorted(self._parts)

    def pending(self) -> tuple[int, Path] | None:
        """The newest complete local checkpoint that is newer than the last committed one."""
        local = layout.local_checkpoints(self.checkpoint_dir)
        if not local:
            return None
        step, path = local[-1]
        if self._committed is not None and step <= self._committed.step:
            return None
        if step in self._refused or step in self._parts:
            return None
        return step, path

    def sync(self) -> CommittedCheckpoint | None:
        """Upload and commit the pending checkpoint, if any, then prune.

        Returns
        -------
        CommittedCheckpoint or None
            The checkpoint committed by this call, or None when there was nothing (or it vanished midway).
        """
        with self._lock:
            if self.nodes > 1:
                return self._sync_group()
            found = self.pending()
            if found is None:
                return None
            step, path = found
            started = time.monotonic()
            try:
                committed = upload_checkpoint(
                    self.s3, self.bucket, self.job_id, step, path, attempt=self.attempt
                )
            except CheckpointVanishedError:
                # Training pruned it locally during the upload, as a newer one exists: take that next time.
                logger.info("checkpoint step %d was replaced during its upload; skipping it", step)
                return None
            except LinkError as exc:
                # Refused whole and never retried: its files would be a link's target, not what training
                # saved. The last committed checkpoint stays the one to resume; a newer one is still taken.
                logger.error("checkpoint step %d refused, not uploaded: %s", step, exc)
                self._refused.add(step)
                return None
            self._committed = committed
            self._upload_seconds = time.monotonic() - started
            self._prune()
            return committed

    def _sync_group(self) -> CommittedCheckpoint | None:
        """Upload this node's part of the pending checkpoint, then commit the newest step whose parts are all
        there (this call's, or one uploaded earlier that waited for another node's)."""
        found = self.pending()
        if found is not None:
            step, path = found
            started = time.monotonic()
            try:
                upload_part(
                    self.s3,
                    self.bucket,
                    self.job_id,
                    step,
                    path,
                    node=self.node,
                    nodes=self.nodes,
                    attempt=self.attempt,
                )
            except CheckpointVanishedError:
                logger.info("checkpoint step %d was replaced during its upload; skipping it", step)
            except (LinkError, ReservedPathError) as exc:
                logger.error("checkpoint step %d refused, not uploaded: %s", step, exc)
                self._refused.add(step)
            else:
                # Uploaded, or found committed already: either way the commit below decides.
                self._parts.add(step)
                self._upload_seconds = time.monotonic() - started
        for step in sorted(self._parts, reverse=True):
            committed = commit_group(
                self.s3, self.bucket, self.job_id, step, nodes=self.nodes, attempt=self.attempt
            )
            if committed is not None:
                self._committed = committed
                self._parts = {waiting for waiting in self._parts if waiting > step}
                self._prune()
                return committed
        return None

    def _prune(self) -> None:
        try:
            deleted = prune_checkpoints(self.s3, self.bucket, self.job_id, self.keep_last)
        except Exception as exc:  # pruning is housekeeping: a failure must not lose the commit
            logger.warning("could not prune old checkpoints: %s", exc)
        else:
            if deleted:
                logger.info("pruned checkpoints %s", deleted)

    def sync_quietly(self) -> CommittedCheckpoint | None:
        """:meth:`sync`, logging instead of raising (a failed upload is retried at the next call)."""
        try:
            return self.sync()
        except Exception as exc:
            logger.warning("checkpoint upload failed: %s", exc)
            return None

    def await_group(self, seconds: float, poll_seconds: float) -> CommittedCheckpoint | None:
        """Keep syncing, up to ``seconds``, while a part this node uploaded waits for the other nodes' parts.

        After the command ended (a notice stops every node at the same step) the other nodes' uploads are
        usually seconds behind: waiting for them lets the step's report name the group checkpoint committed.
        A node that never uploads (it died) costs at most ``seconds``; the commit still happens later, through
        whichever node uploads last.

        Returns
        -------
        CommittedCheckpoint or None
            The newest checkpoint known to be committed.
        """
        deadline = time.monotonic() + seconds
        while self.awaiting and time.monotonic() < deadline:
            time.sleep(poll_seconds)
            self.sync_quietly()
        return self._committed

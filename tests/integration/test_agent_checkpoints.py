"""The agent against moto S3: staging verified objects, and checkpoints committed, pruned and restored."""

from __future__ import annotations

import json

import pytest

from spotrun.agent import checkpoint_store
from spotrun.agent.transfer.download import StageItem, StagingError, download_verified
from spotrun.model import layout
from tests.integration.conftest import AGENT_BUCKET as BUCKET
from tests.integration.test_agent import write_checkpoint


def restore_latest(s3, bucket: str, job_id: str, directory) -> checkpoint_store.RestoredCheckpoint | None:
    """The latest committed checkpoint of a job restored into ``directory`` (None: it has none)."""
    latest = checkpoint_store.latest_committed(s3, bucket, job_id)
    if latest is None:
        return None
    return checkpoint_store.download_checkpoint(s3, bucket, job_id, latest.step, directory)


def test_objects_uploaded_with_sha256_are_staged_against_that_checksum(s3, tmp_path):
    # Given one object with a SHA-256 checksum and one uploaded the SDK's default way
    s3.put_object(Bucket=BUCKET, Key="in/a.bin", Body=b"a" * 5000, ChecksumAlgorithm="SHA256")
    s3.put_object(Bucket=BUCKET, Key="in/b.bin", Body=b"b" * 5000)

    # When each is staged
    sha = download_verified(s3, StageItem(BUCKET, "in/a.bin", tmp_path / "a.bin"), root=tmp_path)
    default = download_verified(s3, StageItem(BUCKET, "in/b.bin", tmp_path / "b.bin"), root=tmp_path)

    # Then the SHA-256 was checked, and the other got the best check available
    assert sha.algorithm == "sha256"
    assert default.algorithm in ("crc32", "md5")
    assert (tmp_path / "a.bin").read_bytes() == b"a" * 5000


def test_checkpoints_are_committed_listed_pruned_and_restored(s3, tmp_path):
    # Given four local checkpoints uploaded in turn, pruning to the newest two
    for step in (50, 100, 150, 200):
        local = write_checkpoint(tmp_path / "local", step, f"weights-{step}".encode())
        checkpoint_store.upload_checkpoint(s3, BUCKET, "j-000000000001", step, local, attempt=2)
        checkpoint_store.prune_checkpoints(s3, BUCKET, "j-000000000001", keep_last=2)

    # When the latest is looked up and restored on another machine
    latest = checkpoint_store.latest_committed(s3, BUCKET, "j-000000000001")
    restored = restore_latest(s3, BUCKET, "j-000000000001", tmp_path / "restore")

    # Then only the newest two remain, and the restore is the committed content
    assert [
        (c.step, c.committed) for c in checkpoint_store.list_checkpoints(s3, BUCKET, "j-000000000001")
    ] == [
        (150, True),
        (200, True),
    ]
    assert latest == checkpoint_store.CommittedCheckpoint(
        200, "jobs/j-000000000001/checkpoints/step-000000000200/"
    )
    assert restored is not None
    assert restored.path == tmp_path / "restore" / "step-000000000200"
    assert (restored.path / "weights.bin").read_bytes() == b"weights-200"
    assert json.loads((restored.path / "sub" / "meta.json").read_text()) == {"step": 200}
    marker = checkpoint_store.read_marker(s3, BUCKET, "j-000000000001", 200)
    assert marker.attempt == 2
    assert [f.path for f in marker.files] == ["sub/meta.json", "weights.bin"]


def test_a_checkpoint_without_its_marker_is_never_the_latest(s3, tmp_path):
    # Given a committed step 50, and step 100 whose upload died before the marker
    checkpoint_store.upload_checkpoint(
        s3, BUCKET, "j-000000000001", 50, write_checkpoint(tmp_path, 50, b"fifty")
    )
    s3.put_object(
        Bucket=BUCKET, Key=layout.checkpoint_prefix("j-000000000001", 100) + "weights.bin", Body=b"half"
    )

    # When the latest is looked up and restored
    latest = checkpoint_store.latest_committed(s3, BUCKET, "j-000000000001")
    restored = restore_latest(s3, BUCKET, "j-000000000001", tmp_path / "restore")

    # Then step 100 is ignored
    assert latest is not None
    assert latest.step == 50
    assert restored is not None
    assert (restored.path / "weights.bin").read_bytes() == b"fifty"


def test_uploading_a_committed_step_again_replaces_it_as_a_whole(s3, tmp_path):
    # Given step 50 committed with two files
    checkpoint_store.upload_checkpoint(
        s3, BUCKET, "j-000000000001", 50, write_checkpoint(tmp_path / "a", 50, b"first")
    )

    # When step 50 is uploaded again with other content and one file fewer
    again = tmp_path / "b" / layout.checkpoint_name(50)
    again.mkdir(parents=True)
    (again / "weights.bin").write_bytes(b"second")
    checkpoint_store.upload_checkpoint(s3, BUCKET, "j-000000000001", 50, again)

    # Then a restore gets exactly the new files (the old extra object is not part of the checkpoint)
    restored = checkpoint_store.download_checkpoint(s3, BUCKET, "j-000000000001", 50, tmp_path / "restore")
    assert sorted(p.name for p in restored.path.rglob("*")) == ["weights.bin"]
    assert (restored.path / "weights.bin").read_bytes() == b"second"


def test_a_checkpoint_deleted_before_its_upload_is_not_committed(s3, tmp_path):
    # Given a checkpoint directory that training already pruned
    gone = tmp_path / layout.checkpoint_name(50)

    # When / Then
    with pytest.raises(checkpoint_store.CheckpointVanishedError):
        checkpoint_store.upload_checkpoint(s3, BUCKET, "j-000000000001", 50, gone)
    assert checkpoint_store.latest_committed(s3, BUCKET, "j-000000000001") is None


def test_a_restore_refuses_an_object_changed_after_its_commit(s3, tmp_path):
    # Given a committed checkpoint whose file was later overwritten in S3 (with a valid S3 checksum)
    checkpoint_store.upload_checkpoint(
        s3, BUCKET, "j-000000000001", 50, write_checkpoint(tmp_path, 50, b"fifty")
    )
    key = layout.checkpoint_prefix("j-000000000001", 50) + "weights.bin"
    s3.put_object(Bucket=BUCKET, Key=key, Body=b"fiftx", ChecksumAlgorithm="SHA256")

    # When / Then the marker's digest catches it, and nothing half-restored is left
    with pytest.raises(StagingError, match="expected digest"):
        checkpoint_store.download_checkpoint(s3, BUCKET, "j-000000000001", 50, tmp_path / "restore")
    assert list((tmp_path / "restore").iterdir()) == []

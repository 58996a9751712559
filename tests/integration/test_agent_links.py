"""Links planted in a job's directories are never followed: not by uploads, not by staging, not by a restore.

Each test plants a symbolic link to a file or directory outside the job holding a secret marker, and checks
both that the agent refuses (or skips) with an error naming the link and that the marker never reaches S3.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from spotrun.agent import checkpoint_store
from spotrun.agent.links import LinkError
from spotrun.agent.step_runner import EXIT_REPORTED, execute
from spotrun.agent.steps.final_outputs import OutputLinkError, log_tail, upload_log, upload_outputs
from spotrun.agent.supervision.checkpoint_sync import CheckpointSyncer
from spotrun.agent.transfer.download import LinkStagingError
from spotrun.model import layout
from tests.integration.test_agent import (
    BUCKET,
    command,
    context,
    failure_of,
    manifest,
    success_of,
    upload_example,
    write_checkpoint,
)

JOB = "j-000000000001"
MARKER = b"SECRET-MARKER-of-another-job"


def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "secret.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(MARKER)
    return path


def bucket_bytes(s3: Any) -> bytes:
    keys = [entry["Key"] for entry in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    return b"".join(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in keys)


# -- uploads ----------------------------------------------------------------------------------------------


def test_a_symlinked_model_fails_the_train_step_and_is_never_uploaded(s3, tmp_path):
    # Given a training command that makes its model a link to a secret outside the job
    secret = secret_file(tmp_path)
    script = (
        f"import os; os.symlink({str(secret)!r}, os.path.join(os.environ['SPOTRUN_OUTPUT_DIR'], 'model.npy'))"
    )
    document = manifest(command=[sys.executable, "-c", script])
    del document["training"]["code"]
    document["data"]["inputs"] = []
    ctx = context(s3, tmp_path / "nvme")

    # When the train step runs
    execute(command("train", document), ctx)

    # Then it fails naming the link, and the secret is nowhere in the bucket
    error, cause = failure_of(ctx)
    assert error == "Training.Failed"
    assert "model.npy is a symbolic link" in cause.message
    assert cause.exit_code == 0  # the command's own exit, with its log: the refusal is the agent's
    assert MARKER not in bucket_bytes(s3)


def test_an_output_directory_holding_a_linked_directory_is_refused_before_any_upload(s3, tmp_path):
    # Given a real file and a link to a directory outside
    output = tmp_path / "output"
    (output / "model").mkdir(parents=True)
    (output / "model" / "weights.bin").write_bytes(b"weights")
    secret_file(tmp_path)
    (output / "model" / "extra").symlink_to(tmp_path / "outside")

    # When / Then
    with pytest.raises(OutputLinkError, match="extra is a symbolic link"):
        upload_outputs(s3, BUCKET, JOB, output)
    assert bucket_bytes(s3) == b""


def test_a_checkpoint_holding_a_linked_file_is_refused_whole(s3, tmp_path):
    # Given a complete checkpoint with one file replaced by a link to a secret
    directory = write_checkpoint(tmp_path / "ckpt", 50, b"weights")
    (directory / "optimizer.bin").symlink_to(secret_file(tmp_path))

    # When / Then: no file of it and no commit marker is written
    with pytest.raises(LinkError, match=r"optimizer\.bin is a symbolic link"):
        checkpoint_store.upload_checkpoint(s3, BUCKET, JOB, 50, directory)
    assert checkpoint_store.latest_committed(s3, BUCKET, JOB) is None
    assert MARKER not in bucket_bytes(s3)


def test_the_checkpoint_sync_refuses_a_linked_checkpoint_once_and_keeps_the_last_committed(
    s3, tmp_path, caplog
):
    # Given a committed step 50, and a step 100 that is a link to a directory outside
    local = tmp_path / "checkpoints"
    write_checkpoint(local, 50, b"fifty")
    syncer = CheckpointSyncer(s3, BUCKET, JOB, 1, local, keep_last=3)
    assert syncer.sync() is not None
    secret_file(tmp_path)
    (local / layout.checkpoint_name(100)).symlink_to(tmp_path / "outside")

    # When it syncs twice
    with caplog.at_level(logging.ERROR, logger="spotrun.agent.supervision.checkpoint_sync"):
        first, second = syncer.sync(), syncer.sync()

    # Then step 100 is refused once, with the link named, and step 50 stays the checkpoint to resume
    assert first is None
    assert second is None
    refusals = [record.getMessage() for record in caplog.records if "refused" in record.getMessage()]
    assert len(refusals) == 1
    assert "is a symbolic link" in refusals[0]
    latest = checkpoint_store.latest_committed(s3, BUCKET, JOB)
    assert latest is not None
    assert latest.step == 50
    assert MARKER not in bucket_bytes(s3)


def test_a_log_replaced_by_a_link_is_skipped_and_has_no_tail(s3, tmp_path, caplog):
    # Given the attempt's log replaced by a link to a secret
    log = tmp_path / "logs" / "attempt-001.log"
    log.parent.mkdir()
    log.symlink_to(secret_file(tmp_path))

    # When
    with caplog.at_level(logging.WARNING, logger="spotrun.agent.steps.final_outputs"):
        key = upload_log(s3, BUCKET, JOB, 1, log)

    # Then nothing is uploaded, the warning names the link, and no tail of it travels in a failure cause
    assert key is None
    assert "attempt-001.log is a symbolic link" in caplog.text
    assert log_tail(log) == ""
    assert MARKER not in bucket_bytes(s3)


# -- staging and restores --------------------------------------------------------------------------------


def test_a_restage_refuses_to_write_through_a_directory_link_in_the_data_directory(
    s3, tmp_path, example_data
):
    # Given a first staging, then the data directory's "train" replaced by a link to a directory outside
    upload_example(s3, example_data)
    document = manifest()
    document["data"]["inputs"] = [{"source": f"s3://{BUCKET}/ex/data/", "destination": "train"}]
    assert execute(command("stage", document), context(s3, tmp_path / "nvme")) == EXIT_REPORTED
    data = layout.NvmeLayout(tmp_path / "nvme", JOB).data_dir
    outside = tmp_path / "outside"
    outside.mkdir()
    for path in (data / "train").iterdir():
        path.unlink()
    (data / "train").rmdir()
    (data / "train").symlink_to(outside)
    ctx = context(s3, tmp_path / "nvme")

    # When the step is staged again (a retried step, or a replacement instance reusing the volume)
    execute(command("stage", document), ctx)

    # Then staging fails naming the link, and nothing was written where it points
    error, cause = failure_of(ctx)
    assert error == "Staging.Failed"
    assert "train is a symbolic link" in cause.message
    assert list(outside.iterdir()) == []


def test_a_single_object_into_a_linked_directory_destination_is_refused(s3, tmp_path):
    # Given a destination "meta/" already present as a link to a directory outside
    s3.put_object(Bucket=BUCKET, Key="ex/extra/labels.csv", Body=b"a,b\n")
    document = manifest()
    del document["training"]["code"]
    document["data"]["inputs"] = [{"source": f"s3://{BUCKET}/ex/extra/labels.csv", "destination": "meta/"}]
    job = layout.NvmeLayout(tmp_path / "nvme", JOB)
    job.create()
    outside = tmp_path / "outside"
    outside.mkdir()
    (job.data_dir / "meta").symlink_to(outside)
    ctx = context(s3, tmp_path / "nvme")

    # When
    execute(command("stage", document), ctx)

    # Then
    error, cause = failure_of(ctx)
    assert error == "Staging.Failed"
    assert "meta is a symbolic link" in cause.message
    assert list(outside.iterdir()) == []


def test_a_restore_replaces_a_link_at_the_checkpoints_name_instead_of_trusting_it(s3, tmp_path):
    # Given a committed step 100 in S3, and a local "step 100" that is a link to a directory outside
    checkpoint_store.upload_checkpoint(s3, BUCKET, JOB, 100, write_checkpoint(tmp_path / "old", 100, b"w"))
    job = layout.NvmeLayout(tmp_path / "nvme", JOB)
    job.create()
    outside = tmp_path / "outside"
    outside.mkdir()
    (job.checkpoint_dir / layout.checkpoint_name(100)).symlink_to(outside)
    document = manifest()
    del document["training"]["code"]
    document["data"]["inputs"] = []
    ctx = context(s3, tmp_path / "nvme")

    # When the stage step runs
    execute(command("stage", document), ctx)

    # Then the checkpoint was really restored into a directory of the job, and nothing went outside
    assert success_of(ctx)["restored_step"] == 100
    restored = job.checkpoint_dir / layout.checkpoint_name(100)
    assert not restored.is_symlink()
    assert (restored / "weights.bin").read_bytes() == b"w"
    assert list(outside.iterdir()) == []


# -- what the agent writes for the training command ------------------------------------------------------


def train_document() -> dict[str, Any]:
    document = manifest(command=[sys.executable, "-c", "print('never')"])
    del document["training"]["code"]
    document["data"]["inputs"] = []
    return document


def test_the_training_log_is_never_appended_through_a_link_left_in_its_place(s3, tmp_path):
    # Given the attempt's log left as a link to a file outside by an earlier run of the step
    job = layout.NvmeLayout(tmp_path / "nvme", JOB)
    job.create()
    secret = secret_file(tmp_path)
    job.log_file(1).symlink_to(secret)
    ctx = context(s3, tmp_path / "nvme")

    # When the train step runs
    execute(command("train", train_document()), ctx)

    # Then it fails naming the link, and the file it points to is untouched
    error, cause = failure_of(ctx)
    assert error == "Training.Failed"
    assert "attempt-001.log is a symbolic link" in cause.message
    assert secret.read_bytes() == MARKER


def test_the_runtime_copy_replaces_a_link_left_in_its_place_instead_of_writing_through_it(s3, tmp_path):
    # Given the runtime's spotrun/__init__.py left as a link to a file outside
    job = layout.NvmeLayout(tmp_path / "nvme", JOB)
    job.create()
    (job.runtime_dir / "spotrun").mkdir()
    secret = secret_file(tmp_path)
    (job.runtime_dir / "spotrun" / "__init__.py").symlink_to(secret)
    document = train_document()
    document["training"]["command"] = [sys.executable, "-c", "print('ran')"]
    document["outputs"]["model"] = "."
    ctx = context(s3, tmp_path / "nvme")

    # When the train step runs
    execute(command("train", document), ctx)

    # Then the runtime holds a real file again and the file outside is untouched
    assert not (job.runtime_dir / "spotrun" / "__init__.py").is_symlink()
    assert secret.read_bytes() == MARKER


def test_the_runtime_copy_refuses_a_linked_package_directory(s3, tmp_path):
    # Given the runtime's spotrun package left as a link to a directory outside
    job = layout.NvmeLayout(tmp_path / "nvme", JOB)
    job.create()
    outside = tmp_path / "outside"
    outside.mkdir()
    (job.runtime_dir / "spotrun").symlink_to(outside)
    ctx = context(s3, tmp_path / "nvme")

    # When
    execute(command("train", train_document()), ctx)

    # Then
    error, cause = failure_of(ctx)
    assert error == "Training.Failed"
    assert "spotrun is a symbolic link" in cause.message
    assert list(outside.iterdir()) == []


def test_a_restore_into_a_checkpoint_directory_that_is_a_link_is_refused(s3, tmp_path):
    # Given a committed checkpoint, and a local checkpoint directory that is a link to a directory outside
    checkpoint_store.upload_checkpoint(s3, BUCKET, JOB, 100, write_checkpoint(tmp_path / "old", 100, b"w"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "checkpoints").symlink_to(outside)

    # When / Then
    with pytest.raises(LinkStagingError, match="checkpoints is a symbolic link"):
        checkpoint_store.download_checkpoint(s3, BUCKET, JOB, 100, tmp_path / "checkpoints")
    assert list(outside.iterdir()) == []

"""Pure parts of checkpoints: grouping keys, choosing what to prune, the marker, and the model digest."""

from __future__ import annotations

import hashlib

import pytest

from spotrun.agent.checkpoint_store import (
    CheckpointFile,
    CommitMarker,
    RemoteCheckpoint,
    group_checkpoint_keys,
    local_files,
    select_prunable,
)
from spotrun.agent.steps.digest import model_digest, tree_digest
from spotrun.model import layout

JOB = "j-1"


def keys_of(step: int, *, committed: bool, files: tuple[str, ...] = ("a.bin",)) -> list[str]:
    prefix = layout.checkpoint_prefix(JOB, step)
    return [prefix + name for name in files] + ([layout.commit_marker_key(JOB, step)] if committed else [])


def remote(step: int, committed: bool) -> RemoteCheckpoint:
    return RemoteCheckpoint(
        step, layout.checkpoint_prefix(JOB, step), committed, tuple(keys_of(step, committed=committed))
    )


def test_keys_are_grouped_by_step_and_only_a_marker_commits():
    # Given two committed checkpoints, one without its marker, and stray keys
    keys = [
        *keys_of(100, committed=True, files=("a.bin", "sub/b.bin")),
        *keys_of(50, committed=True),
        *keys_of(150, committed=False),
        layout.checkpoints_prefix(JOB) + "README",
        layout.checkpoints_prefix(JOB) + "not-a-step/x",
        "jobs/other/checkpoints/step-000000000200/_COMMITTED.json",
    ]

    # When
    grouped = group_checkpoint_keys(JOB, keys)

    # Then
    assert [(c.step, c.committed) for c in grouped] == [(50, True), (100, True), (150, False)]
    assert grouped[1].prefix == "jobs/j-1/checkpoints/step-000000000100/"
    assert len(grouped[1].keys) == 3


def test_prune_keeps_the_newest_committed_and_drops_older_leftovers():
    # Given committed 50, 100, 150, 200, an abandoned upload at 120 and one in progress at 250
    checkpoints = [remote(s, True) for s in (50, 100, 150, 200)] + [remote(120, False), remote(250, False)]
    checkpoints.sort(key=lambda c: c.step)

    # When keeping 2
    doomed = select_prunable(checkpoints, keep_last=2)

    # Then the older committed and the leftover below the kept ones go; the newer upload stays
    assert [c.step for c in doomed] == [50, 100, 120]


def test_prune_does_nothing_without_a_committed_checkpoint():
    # Given only uncommitted uploads
    checkpoints = [remote(50, False), remote(100, False)]

    # When / Then
    assert select_prunable(checkpoints, keep_last=1) == []


def test_prune_needs_keep_last_of_at_least_one():
    with pytest.raises(ValueError, match="keep_last"):
        select_prunable([remote(50, True)], keep_last=0)


def test_commit_marker_round_trips_through_json():
    # Given a marker
    marker = CommitMarker(
        job_id=JOB,
        step=100,
        attempt=2,
        files=[CheckpointFile(path="a.bin", size=3, sha256="ab" * 32)],
        bytes=3,
        committed_at="2024-01-01T00:00:00Z",
    )

    # When / Then
    again = CommitMarker.model_validate_json(marker.model_dump_json())
    assert again == marker
    assert again.format == "spotrun-checkpoint/v1"


def test_local_files_lists_nested_files_with_posix_paths(tmp_path):
    # Given a checkpoint directory with a subdirectory
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.bin").write_bytes(b"b")
    (tmp_path / "a.bin").write_bytes(b"a")

    # When / Then
    assert [relative for relative, _ in local_files(tmp_path)] == ["a.bin", "sub/b.bin"]


def test_the_digest_of_a_file_model_is_the_sha256_of_its_bytes(tmp_path):
    # Given a model file
    model = tmp_path / "model.npy"
    model.write_bytes(b"weights")

    # When / Then
    assert model_digest(model) == hashlib.sha256(b"weights").hexdigest()


def test_the_digest_of_a_directory_model_hashes_sorted_path_and_digest_lines(tmp_path):
    # Given a model directory
    (tmp_path / "m" / "z").mkdir(parents=True)
    (tmp_path / "m" / "z" / "w.bin").write_bytes(b"w")
    (tmp_path / "m" / "a.json").write_bytes(b"{}")

    # When
    digest = model_digest(tmp_path / "m")

    # Then it is the documented formula, independent of listing order
    lines = f"a.json\0{hashlib.sha256(b'{}').hexdigest()}\nz/w.bin\0{hashlib.sha256(b'w').hexdigest()}\n"
    assert digest == hashlib.sha256(lines.encode()).hexdigest()
    assert (
        tree_digest(
            {"z/w.bin": hashlib.sha256(b"w").hexdigest(), "a.json": hashlib.sha256(b"{}").hexdigest()}
        )
        == digest
    )


def test_the_digest_of_a_directory_changes_with_a_name_or_a_byte(tmp_path):
    # Given / When
    base = tree_digest({"a": "00", "b": "11"})

    # Then
    assert tree_digest({"a": "00", "c": "11"}) != base
    assert tree_digest({"a": "00", "b": "12"}) != base


def test_the_digest_of_a_missing_model_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        model_digest(tmp_path / "absent")

"""The commit rule of a multi-node job's checkpoint: every node's part of the same attempt, consistent, or nothing."""

from __future__ import annotations

import pytest

from spotrun.model import layout
from spotrun.model.agent_protocol.checkpoints import (
    CheckpointFile,
    CommitMarker,
    PartConflictError,
    PartMarker,
    group_checkpoint_keys,
    group_commit_files,
    missing_parts,
)

JOB = "j-1"


def part(node: int, *files: tuple[str, str], nodes: int = 2, attempt: int = 3, step: int = 100) -> PartMarker:
    listed = [CheckpointFile(path=path, size=len(digest), sha256=digest) for path, digest in files]
    return PartMarker(
        job_id=JOB,
        step=step,
        node=node,
        nodes=nodes,
        attempt=attempt,
        files=listed,
        bytes=sum(f.size for f in listed),
    )


def test_every_nodes_part_of_the_attempt_makes_the_checkpoint_committable():
    # Given node 0's state and node 1's node file, both of attempt 3
    parts = {0: part(0, ("state.pt", "aa"), ("rng.pt", "bb")), 1: part(1, ("node-001.json", "cc"))}

    # When the commit's files are gathered
    files = group_commit_files(parts, nodes=2, attempt=3)

    # Then nothing is missing, and the marker lists every node's files, sorted
    assert missing_parts(parts, 2, 3) == []
    assert [f.path for f in files] == ["node-001.json", "rng.pt", "state.pt"]


def test_a_missing_part_is_not_committable():
    # Given only node 0's part of a 3-node group
    parts = {0: part(0, ("state.pt", "aa"), nodes=3)}

    # When / Then nodes 1 and 2 are missing, and no file list is made
    assert missing_parts(parts, 3, 3) == [1, 2]
    with pytest.raises(ValueError, match=r"nodes \[1, 2\] are missing"):
        group_commit_files(parts, nodes=3, attempt=3)


def test_a_part_left_by_another_attempt_counts_as_missing():
    # Given node 1's part of the same step from attempt 2 (the group's earlier run, which never committed it)
    parts = {0: part(0, ("state.pt", "aa")), 1: part(1, ("node-001.json", "cc"), attempt=2)}

    # When / Then attempt 3 cannot commit with it
    assert missing_parts(parts, 2, 3) == [1]


def test_a_part_of_a_group_of_another_size_counts_as_missing():
    # Given node 1's part written when the group had 3 nodes
    parts = {0: part(0, ("state.pt", "aa")), 1: part(1, ("node-001.json", "cc"), nodes=3)}

    # When / Then a group of 2 does not count it
    assert missing_parts(parts, 2, 3) == [1]


def test_two_nodes_writing_one_path_alike_list_it_once():
    # Given both nodes uploaded the same replicated file, with the same bytes
    parts = {0: part(0, ("config.json", "aa")), 1: part(1, ("config.json", "aa"), ("node-001.json", "cc"))}

    # When / Then the marker lists it once
    assert [f.path for f in group_commit_files(parts, nodes=2, attempt=3)] == ["config.json", "node-001.json"]


def test_two_nodes_writing_one_path_differently_is_refused():
    # Given both nodes wrote state.pt, with different bytes: S3 holds only one of them
    parts = {0: part(0, ("state.pt", "aa")), 1: part(1, ("state.pt", "bb"))}

    # When / Then the checkpoint is refused, the message naming the file
    with pytest.raises(PartConflictError, match=r"'state\.pt'"):
        group_commit_files(parts, nodes=2, attempt=3)


def test_part_markers_sit_inside_their_step_and_a_step_with_parts_only_is_uncommitted():
    # Given a step whose two parts were uploaded, without a commit marker
    keys = [
        layout.checkpoint_prefix(JOB, 100) + "state.pt",
        layout.part_marker_key(JOB, 100, 0),
        layout.part_marker_key(JOB, 100, 1),
    ]

    # When the keys are grouped by checkpoint
    (found,) = group_checkpoint_keys(JOB, keys)

    # Then the parts are the step's keys (pruned with it) and the step is not committed
    assert found.step == 100
    assert not found.committed
    assert layout.part_marker_key(JOB, 100, 1) == layout.checkpoint_prefix(JOB, 100) + "_PARTS/node-001.json"


def test_a_one_node_marker_reads_as_one_node():
    # Given a commit marker written before markers said their nodes
    marker = CommitMarker.model_validate(
        {"job_id": JOB, "step": 1, "files": [], "bytes": 0, "committed_at": "2026-01-01T00:00:00Z"}
    )

    # When / Then it is a one-node checkpoint
    assert marker.nodes == 1

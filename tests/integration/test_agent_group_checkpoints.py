"""Two nodes' agents on one moto S3 bucket: each uploads its part, the group checkpoint is committed once, and only
a complete one is ever restored."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from spotrun.agent import checkpoint_store
from spotrun.agent.group_checkpoints import commit_group, upload_part
from spotrun.agent.steps.stage import restore_checkpoint
from spotrun.agent.supervision.checkpoint_sync import CheckpointSyncer
from spotrun.model import layout
from spotrun.model.agent_protocol.command import NodeGroup
from tests.integration.conftest import AGENT_BUCKET as BUCKET
from tests.integration.test_agent import command, context

JOB = "j-000000000001"


def node_checkpoint(directory: Path, step: int, files: dict[str, bytes]) -> Path:
    path = directory / layout.checkpoint_name(step)
    path.mkdir(parents=True)
    for name, payload in files.items():
        (path / name).write_bytes(payload)
    return path


def syncer(s3: Any, directory: Path, node: int, attempt: int = 1) -> CheckpointSyncer:
    return CheckpointSyncer(s3, BUCKET, JOB, attempt, directory, keep_last=2, node=node, nodes=2)


def group_command(node: int, attempt: int = 1) -> Any:
    document = {
        "name": "pair",
        "resources": {"nodes": 2},
        "training": {
            "command": ["torchrun", "train.py"],
            "checkpoint": {"interval_steps": 50, "keep_last": 2},
        },
    }
    group = NodeGroup(nodes=2, node=node, rendezvous_host="127.0.0.1", rendezvous_id="pair-1")
    return command("stage", document, attempt=attempt, group=group)


def test_the_group_checkpoint_is_committed_only_once_both_parts_are_up(s3, tmp_path):
    # Given node 0's state of step 100 and node 1's node file of the same step, each in its own directory
    node_checkpoint(tmp_path / "n0", 100, {"state.pt": b"state", "rng.pt": b"rng"})
    node_checkpoint(tmp_path / "n1", 100, {"node-001.json": b'{"node": 1}'})
    first, second = syncer(s3, tmp_path / "n0", 0), syncer(s3, tmp_path / "n1", 1)

    # When node 0 uploads its part alone
    waiting = first.sync()

    # Then nothing is committed, nor listed as committed
    assert waiting is None
    assert first.awaiting == [100]
    assert checkpoint_store.latest_committed(s3, BUCKET, JOB) is None

    # When node 1 uploads its part
    committed = second.sync()

    # Then node 1 committed the group's checkpoint, listing both nodes' files; node 0 learns it at its next sync
    assert committed is not None
    assert committed.step == 100
    latest = checkpoint_store.latest_committed(s3, BUCKET, JOB)
    assert latest is not None
    assert latest.step == 100
    marker = checkpoint_store.read_marker(s3, BUCKET, JOB, 100)
    assert [f.path for f in marker.files] == ["node-001.json", "rng.pt", "state.pt"]
    assert marker.nodes == 2
    again = first.sync()
    assert again is not None
    assert again.step == 100
    assert first.awaiting == []

    # When the committed checkpoint is restored on a fresh node
    restored = checkpoint_store.download_checkpoint(s3, BUCKET, JOB, 100, tmp_path / "fresh")

    # Then it holds every node's files
    assert sorted(p.name for p in restored.path.iterdir()) == ["node-001.json", "rng.pt", "state.pt"]


def test_two_nodes_finding_the_parts_complete_at_once_write_the_marker_once(s3, tmp_path):
    # Given both parts of step 100 uploaded, and two nodes that both see the marker missing before either writes
    for node, files in ((0, {"state.pt": b"s"}), (1, {"node-001.json": b"n"})):
        path = node_checkpoint(tmp_path / f"n{node}", 100, files)
        upload_part(s3, BUCKET, JOB, 100, path, node=node, nodes=2, attempt=1)
    both_checked = threading.Barrier(2, timeout=10)
    written: list[str] = []

    class RacingS3:
        def __getattr__(self, name: str) -> Any:
            return getattr(s3, name)

        def put_object(self, **kwargs: Any) -> Any:
            both_checked.wait()  # both passed their check for the marker
            answer = s3.put_object(**kwargs)
            written.append(kwargs["Key"])
            return answer

    results: list[Any] = []

    def commit() -> None:
        results.append(commit_group(RacingS3(), BUCKET, JOB, 100, nodes=2, attempt=1))

    threads = [threading.Thread(target=commit) for _ in range(2)]

    # When they commit at once
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)

    # Then the marker was written once, and both know the checkpoint committed
    assert written == [layout.commit_marker_key(JOB, 100)]
    assert [r.step for r in results] == [100, 100]


def test_a_part_left_by_an_earlier_attempt_does_not_complete_the_group(s3, tmp_path):
    # Given node 1's part of step 100 from attempt 1, and node 0's part of it in attempt 2
    node_checkpoint(tmp_path / "n1", 100, {"node-001.json": b"old"})
    node_checkpoint(tmp_path / "n0", 100, {"state.pt": b"new"})
    assert syncer(s3, tmp_path / "n1", 1, attempt=1).sync() is None

    # When node 0 of attempt 2 syncs
    committed = syncer(s3, tmp_path / "n0", 0, attempt=2).sync()

    # Then the checkpoint is not committed
    assert committed is None
    assert checkpoint_store.latest_committed(s3, BUCKET, JOB) is None


def test_a_node_restores_only_the_complete_group_checkpoint(s3, tmp_path):
    # Given step 100 committed by both nodes, then step 200 of which only node 0's part was uploaded
    node_checkpoint(tmp_path / "n0", 100, {"state.pt": b"state-100"})
    node_checkpoint(tmp_path / "n1", 100, {"node-001.json": b"n-100"})
    syncer(s3, tmp_path / "n0", 0).sync()
    assert syncer(s3, tmp_path / "n1", 1).sync() is not None
    node_checkpoint(tmp_path / "n0", 200, {"state.pt": b"state-200"})
    assert syncer(s3, tmp_path / "n0", 0).sync() is None

    # And node 1, kept for the next attempt, whose checkpoint directory holds its own parts of 100 and 200 only
    nvme = tmp_path / "nvme"
    job_layout = layout.NvmeLayout(nvme, JOB)
    job_layout.create()
    node_checkpoint(job_layout.checkpoint_dir, 100, {"node-001.json": b"n-100"})
    node_checkpoint(job_layout.checkpoint_dir, 200, {"node-001.json": b"n-200"})

    # When it stages for attempt 2
    restored = restore_checkpoint(group_command(1, attempt=2), context(s3, nvme), job_layout)

    # Then it restored step 100 whole, and no other local checkpoint is left to resume from
    assert restored is not None
    assert restored.step == 100
    assert restored.files == 2
    assert [step for step, _ in layout.local_checkpoints(job_layout.checkpoint_dir)] == [100]
    step_100 = job_layout.checkpoint_dir / layout.checkpoint_name(100)
    assert (step_100 / "state.pt").read_bytes() == b"state-100"


def test_a_node_holding_the_whole_committed_checkpoint_keeps_it(s3, tmp_path):
    # Given step 100 committed by both nodes, and a node whose directory holds all of it already
    node_checkpoint(tmp_path / "n0", 100, {"state.pt": b"s"})
    node_checkpoint(tmp_path / "n1", 100, {"node-001.json": b"n"})
    syncer(s3, tmp_path / "n0", 0).sync()
    syncer(s3, tmp_path / "n1", 1).sync()
    nvme = tmp_path / "nvme"
    job_layout = layout.NvmeLayout(nvme, JOB)
    job_layout.create()
    node_checkpoint(job_layout.checkpoint_dir, 100, {"state.pt": b"s", "node-001.json": b"n"})

    # When it stages
    restored = restore_checkpoint(group_command(0, attempt=2), context(s3, nvme), job_layout)

    # Then nothing was copied
    assert restored is not None
    assert (restored.step, restored.files) == (100, 0)


def test_without_a_committed_group_checkpoint_a_node_starts_afresh(s3, tmp_path):
    # Given only node 0's part of step 100 uploaded, and a kept node holding its own part of step 100
    node_checkpoint(tmp_path / "n0", 100, {"state.pt": b"s"})
    syncer(s3, tmp_path / "n0", 0).sync()
    nvme = tmp_path / "nvme"
    job_layout = layout.NvmeLayout(nvme, JOB)
    job_layout.create()
    node_checkpoint(job_layout.checkpoint_dir, 100, {"node-001.json": json.dumps({"node": 1}).encode()})

    # When it stages
    restored = restore_checkpoint(group_command(1, attempt=2), context(s3, nvme), job_layout)

    # Then there is nothing to resume
    assert restored is None
    assert layout.local_checkpoints(job_layout.checkpoint_dir) == []

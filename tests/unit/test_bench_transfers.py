"""The transfer bench's reading of the emulator's CPU: what the server process ran during a measurement."""

from __future__ import annotations

import subprocess
import sys

from bench.transfer_tools import process_cpu_seconds


def test_the_cpu_a_process_ran_is_read_from_its_stat_and_grows_as_it_works():
    # Given a process that burns CPU for a while, then waits on its input
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\n"
            "print('done', flush=True)\nsys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        before = process_cpu_seconds(child.pid)
        # When it has done its work
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "done"
        worked = process_cpu_seconds(child.pid)
        # Then its CPU seconds grew by the half second it burned, and no more while it waits
        assert 0.4 <= worked - before <= 2.0
        assert process_cpu_seconds(child.pid) - worked < 0.1
    finally:
        child.communicate("")


def test_spotruns_upload_sends_as_many_files_at_once_as_it_is_told(monkeypatch, tmp_path):
    # Given the bench's one-measurement entry point, with S3 and the upload replaced by recorders
    import argparse

    import bench.transfer_tools as tools
    from spotrun.agent import checkpoint_store

    class NoS3:
        def list_buckets(self) -> dict:
            return {}

    asked: list[int] = []
    monkeypatch.setattr(tools, "client", lambda endpoint: NoS3())
    monkeypatch.setattr(
        checkpoint_store, "upload_checkpoint", lambda *args, max_workers: asked.append(max_workers)
    )
    args = argparse.Namespace(
        tool="spotrun",
        case="upload",
        endpoint="http://127.0.0.1:1",
        workers=7,
        prefix="jobs/j-000000000001/checkpoints/step-000000000001/",
        source=str(tmp_path),
        destination=str(tmp_path),
    )
    # When spotrun's upload is measured with 7 workers
    tools.once(args)
    # Then the upload was asked for 7 files at once
    assert asked == [7]

"""The transfer bench's reading of the emulator's CPU: what the server process ran during a measurement."""

from __future__ import annotations

import subprocess
import sys

import pytest

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


def _samples(crt_speed: float, crt_cpu: float) -> dict[str, list[dict[str, float]]]:
    """Three runs of every tool in every case: spotrun 100 MB/s and 2 CPU-s per GiB, the CRT as given."""
    from bench.transfers import CASES, CEILING_WORKERS, DATASETS

    def run(speed: float, cpu: float) -> list[dict[str, float]]:
        sample = {
            "mb_per_s": speed,
            "cpu_seconds": cpu,
            "cpu_seconds_per_gib": cpu,
            "server_cpu_seconds": 1.0,
        }
        return [dict(sample) for _ in range(3)]

    samples = {}
    for case in CASES:
        for dataset in DATASETS:
            samples[f"{case}/{dataset}/spotrun"] = run(100.0, 2.0)
            samples[f"{case}/{dataset}/crt"] = run(crt_speed, crt_cpu)
            samples[f"{case}/{dataset}/s5cmd"] = run(90.0, 2.5)
            for workers in CEILING_WORKERS:
                samples[f"{case}/{dataset}/ceiling/{workers}"] = run(105.0, 1.9)
    return samples


@pytest.mark.parametrize(
    ("crt_speed", "crt_cpu", "within"),
    [(91.0, 2.19, True), (120.0, 1.0, True), (89.0, 1.0, False), (120.0, 2.21, False)],
    ids=["just within", "ahead", "slower by more than 10 %", "costlier by more than 10 %"],
)
def test_the_crt_counts_as_within_only_when_within_10_percent_on_both_figures(crt_speed, crt_cpu, within):
    # Given runs where the CRT's MB/s and CPU-seconds per verified GiB stand so against spotrun's
    from bench.transfers import _report

    # When the section's report is made
    report = _report(_samples(crt_speed, crt_cpu), runs=3)

    # Then every case, and the whole, says whether the CRT is within the margin on both figures
    assert {row["within"] for row in report["results"]["crt_rows"]} == {within}
    assert report["results"]["crt_within_margin"] is within
    assert ("every case: yes" in report["markdown"]) is within

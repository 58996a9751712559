"""`spotrun demo --json`: what `make demo` runs, with the record scripts rely on; `--example` picks another."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys

import yaml
from rich.console import Console
from typer.testing import CliRunner

from spotrun.cli.app import app
from spotrun.cli.demo import run_demo
from spotrun.local import demo as demo_scenario
from spotrun.local.demo import EXAMPLE_DIR, available_examples


def test_demo_json_prints_the_final_job_record_on_the_last_line(tmp_path):
    # Given a fresh working directory for the emulator
    # When the demo runs as a user would run it
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "spotrun.cli.app",
            "demo",
            "--json",
            "--seed",
            "1",
            "--state-dir",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    # Then it exits 0 and its last stdout line is the job record with the promised fields
    assert finished.returncode == 0, finished.stderr[-3000:]
    record = json.loads(finished.stdout.strip().splitlines()[-1])
    assert record["status"] == "SUCCEEDED"
    assert record["job_id"].startswith("tiny-regression-")
    # (one interruption by default, so the demo shows the recovery)
    first, last = record["attempts"]
    for attempt in (first, last):
        for field in (
            "instance_id",
            "instance_type",
            "availability_zone",
            "started_at",
            "ended_at",
            "end_reason",
        ):
            assert attempt[field], field
        assert attempt["lifecycle"] == "spot"
    assert first["end_reason"] == "interrupted"
    assert first["steps_lost"] is not None
    assert first["checkpoint_restored"] is None
    assert last["end_reason"] == "completed"
    assert last["checkpoint_restored"].endswith(f"step-{last['restored_step']:012d}/")
    assert [item["storage_class"] for item in record["archive"]] == ["GLACIER"]
    assert record["archive"][0]["uri"].startswith("s3://spotrun-archive-local/models/")
    assert record["cost"]["usd"] < record["cost"]["spot_at_on_demand_usd"]
    assert 0 < record["cost"]["savings_pct"] < 100
    assert len(record["model_sha256"]) == 64
    # And the record is the only thing on stdout (no metrics line from a handler still running)
    assert len(finished.stdout.strip().splitlines()) == 1, finished.stdout[-3000:]
    # And the people-facing summary went to stderr, not into the JSON stream, and ends it
    assert "status: SUCCEEDED" in finished.stderr
    assert finished.stderr.rstrip("\n").splitlines()[-1].startswith("control-plane logs: ")
    assert "Traceback" not in finished.stderr
    assert "Logging error" not in finished.stderr
    assert "interruption warning to i-" in finished.stderr
    assert "work lost to interruptions:" in finished.stderr


def test_make_demo_ends_with_its_summary_and_nothing_after(tmp_path):
    # Given a fresh working directory for the emulator
    # When the demo runs as `make demo` runs it (the summary on stdout, on a pipe)
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "spotrun.cli.app",
            "demo",
            "--seed",
            "2",
            "--state-dir",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    # Then it succeeds, and the summary and its closing line are the last lines on stdout
    assert finished.returncode == 0, finished.stderr[-3000:]
    lines = finished.stdout.rstrip("\n").splitlines()
    status = max(index for index, line in enumerate(lines) if line.startswith("status: "))
    assert lines[status] == "status: SUCCEEDED"
    assert len(lines) == status + 3, lines[status:]
    report = tmp_path / "demo" / "report.html"
    assert lines[-2] == f"report: {report} (its main chart: {report.with_suffix('.png')})"
    assert lines[-1].startswith("control-plane logs: ")
    # And the job's report was written: the page with its two attempts, the chart as a PNG
    page = report.read_text()
    assert "<svg" in page
    assert "Attempts" in page
    assert report.with_suffix(".png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    # And nothing else was printed anywhere: no logging traceback, no metrics line from a late handler
    assert finished.stderr == ""
    assert not [line for line in lines if line.lstrip().startswith("{")]
    # And the handlers' logs and metrics went to the log file, the last handler's included
    logged = [json.loads(line) for line in (tmp_path / "demo" / "control-plane.log").read_text().splitlines()]
    assert "job finished" in [entry.get("message") for entry in logged]
    assert any("JobsSucceeded" in entry for entry in logged)


def test_an_unknown_example_is_refused_listing_the_available_ones():
    # Given no example of that name under examples/
    # When the demo is asked for it
    result = CliRunner().invoke(app, ["demo", "--example", "no-such-example"])
    # Then it is a usage error naming the examples there are, before any emulator starts
    assert result.exit_code == 2
    assert "no example 'no-such-example'" in result.stderr
    assert f"available: {', '.join(available_examples())}" in result.stderr
    assert "tiny-regression" in available_examples()


RUN_PY = """
import os, runpy, subprocess, sys
# Like the framework examples, it makes its own data: nothing comes from data.inputs.
data = os.environ["SPOTRUN_DATA_DIR"]
subprocess.run([sys.executable, "generate_data.py", data], check=True, capture_output=True)
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
"""


def test_an_example_with_a_workdir_runs_through_the_packer_and_post_code(tmp_path, monkeypatch):
    # Given an example shaped as the framework ones: training.workdir ".", no data inputs, its data made in-script
    example = tmp_path / "examples" / "tiny-workdir"
    example.mkdir(parents=True)
    for name in ("train.py", "generate_data.py"):
        shutil.copy(EXAMPLE_DIR / name, example / name)
    (example / "run.py").write_text(RUN_PY)
    (example / ".spotrunignore").write_text("README.md\n")
    (example / "README.md").write_text("not uploaded")
    document = yaml.safe_load((EXAMPLE_DIR / "manifest.yaml").read_text())
    del document["data"], document["training"]["code"]
    document["name"] = "tiny-workdir"
    document["training"]["workdir"] = "."
    document["training"]["command"] = ["python", "run.py", "--steps", "30", "--step-seconds", "0.02"]
    (example / "manifest.yaml").write_text(yaml.safe_dump(document))
    monkeypatch.setattr(demo_scenario, "EXAMPLES_DIR", tmp_path / "examples")
    out = io.StringIO()

    # When the demo runs it, without interruptions
    job = run_demo(Console(file=out, width=200), tmp_path / "demo", 0, 1, example="tiny-workdir")

    # Then its directory was packed and uploaded through the REST API, and the job ran from it
    text = out.getvalue()
    assert job.status.value == "SUCCEEDED", text[-3000:]
    assert "code uploaded: s3://spotrun-jobs-local/code/" in text
    assert "(5 files," in text  # .spotrunignore, generate_data.py, manifest.yaml, run.py, train.py: no README
    assert "manifest submitted to http://127.0.0.1:" in text
    assert job.require_manifest().training.code.startswith("s3://spotrun-jobs-local/code/")

"""The job commands (`spotrun submit|status|list|logs|cancel`) against a running `local up` and its REST API."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from spotrun.cli.app import app
from spotrun.shape import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "tiny-regression" / "manifest.yaml"
runner = CliRunner()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The working directory of a `spotrun local up` running in a process of its own, the example uploaded."""
    where = tmp_path_factory.mktemp("cli-jobs")
    command = [
        sys.executable,
        "-m",
        "spotrun.cli.app",
        "local",
        "up",
        "--state-dir",
        str(where),
        "--time-scale",
        "0.02",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    up = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while not (where / "local.json").exists():
            assert up.poll() is None, up.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "`spotrun local up` wrote no state file"
            time.sleep(0.1)
        yield where
    finally:
        up.send_signal(signal.SIGTERM)
        up.communicate(timeout=60)


def manifest(tmp_path: Path, steps: int, **changes: Any) -> Path:
    """The tiny example with ``--steps`` in its command (and ``changes`` at the top level)."""
    document = yaml.safe_load(EXAMPLE.read_text())
    document["training"]["command"] += ["--steps", str(steps)]
    document.update(changes)
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def spotrun(workdir: Path, *argv: str) -> Any:
    return runner.invoke(app, [*argv, "--state-dir", str(workdir)])


def as_json(workdir: Path, *argv: str) -> Any:
    result = spotrun(workdir, *argv, "--json")
    assert result.exit_code == 0, result.output + result.stderr
    return json.loads(result.stdout)


def test_submit_wait_then_status_list_logs_and_restore(workdir: Path, tmp_path: Path) -> None:
    # Given the tiny example with 30 steps
    file = manifest(tmp_path, steps=30)
    # When it is submitted and followed until it ends
    submitted = spotrun(workdir, "submit", str(file), "--wait", "--poll", "0.2")
    # Then the summary shows it succeeded, and status, list, logs and restore all find it
    assert submitted.exit_code == 0, submitted.output + submitted.stderr
    assert "status: SUCCEEDED" in submitted.stdout
    view = as_json(workdir, "status")
    assert view["status"] == "SUCCEEDED"
    assert "SUCCEEDED" in spotrun(workdir, "status", view["job_id"]).stdout
    listed = as_json(workdir, "list", "--all")
    assert view["job_id"] in [job["job_id"] for job in listed["jobs"]]
    assert view["job_id"] in spotrun(workdir, "list").stdout
    logs = spotrun(workdir, "logs", view["job_id"], "--tail", "5")
    assert logs.exit_code == 0, logs.stderr
    assert "== attempt 1" in logs.stdout
    assert as_json(workdir, "logs", view["job_id"])["logs"][0]["found"] is True
    restored = as_json(workdir, "restore", view["job_id"])
    assert [item["state"] for item in restored["objects"]] in (["in-progress"], ["readable"])


def test_cancel_of_a_running_job_leaves_no_instance_running(workdir: Path, tmp_path: Path) -> None:
    # Given a long job, training
    file = manifest(tmp_path, steps=100_000, name="long-regression")
    job_id = as_json(workdir, "submit", str(file), "--idempotency-key", f"long-{time.time_ns()}")["job_id"]
    deadline = time.monotonic() + 30
    while as_json(workdir, "status", job_id)["status"] != "TRAINING":
        assert time.monotonic() < deadline, "the job never started training"
        time.sleep(0.2)
    # When it is cancelled
    cancelled = spotrun(workdir, "cancel", job_id)
    # Then it is CANCELLED and none of its instances still runs
    assert cancelled.exit_code == 0, cancelled.stderr
    assert "CANCELLED" in cancelled.stdout
    view = as_json(workdir, "status", job_id)
    assert view["status"] == "CANCELLED"
    ours = {attempt["instance_id"] for attempt in view["attempts"]}
    instances = as_json(workdir, "local", "instances")["instances"]
    assert ours
    assert all(i["state"] not in ("pending", "running") for i in instances if i["instance_id"] in ours)


def test_a_bad_manifest_is_refused_locally_naming_the_field(workdir: Path, tmp_path: Path) -> None:
    # Given a manifest whose training has no command
    file = manifest(tmp_path, steps=30)
    document = yaml.safe_load(file.read_text())
    del document["training"]["command"]
    file.write_text(yaml.safe_dump(document))
    # When it is submitted
    result = spotrun(workdir, "submit", str(file))
    # Then nothing is submitted: exit 1, the field named on stderr
    assert result.exit_code == 1
    assert "training.command" in result.stderr
    assert result.stdout == ""


def test_an_unknown_job_is_exit_1_with_the_api_message(workdir: Path) -> None:
    # Given no job with this id
    # When its status is asked
    result = spotrun(workdir, "status", "no-such-job-000")
    # Then the API's message is printed on stderr and the exit code is 1
    assert result.exit_code == 1
    assert "no-such-job-000" in result.stderr
    assert "404" in result.stderr


def test_submit_wait_through_a_pipe_prints_the_job_id_while_the_job_runs(
    workdir: Path, tmp_path: Path
) -> None:
    # Given a long job, submitted with --wait by a process whose stdout is a pipe (a script, a CI log)
    file = manifest(tmp_path, steps=100_000, name="piped-regression")
    command = [sys.executable, "-m", "spotrun.cli.app", "submit", str(file), "--wait", "--poll", "0.2"]
    command += ["--idempotency-key", f"piped-{time.time_ns()}", "--state-dir", str(workdir)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    waiting = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # When its first line of output is read
        assert waiting.stdout is not None
        readable, _, _ = select.select([waiting.stdout], [], [], 60)
        assert readable, "nothing on stdout within 60 s while the job runs"
        first = waiting.stdout.readline()
        # Then it is the job's id, there while the job has not ended and the command still follows it
        assert first.startswith("job piped-regression-"), first
        assert first.endswith(" started\n"), first
        job_id = first.split()[1]
        assert as_json(workdir, "status", job_id)["status"] not in ("SUCCEEDED", "FAILED", "CANCELLED")
        assert waiting.poll() is None
        # And with that id the job can be cancelled, which ends the wait (exit 1: it did not succeed)
        assert spotrun(workdir, "cancel", job_id).exit_code == 0
        rest, errors = waiting.communicate(timeout=60)
        assert waiting.returncode == 1, errors[-3000:]
        assert "status: CANCELLED" in rest
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.communicate()

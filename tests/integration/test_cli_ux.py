"""What people and scripts read from the CLI, against a `spotrun local up` started with no --state-dir: every
`--json` answer is one JSON object (errors too), the runtime is found from any directory, and `list` and
`status` show where jobs stand."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from spotrun.cli.app import app
from spotrun.cli.target import STATE_HOME_ENV
from spotrun.shape import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "tiny-regression" / "manifest.yaml"
runner = CliRunner()


@pytest.fixture(scope="module")
def state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A `spotrun local up` started without --state-dir, in a directory of its own: it records itself under the
    per-user state directory ($XDG_STATE_HOME, this module's own)."""
    home = tmp_path_factory.mktemp("state-home")
    started_in = tmp_path_factory.mktemp("started-here")
    env = {**os.environ, STATE_HOME_ENV: str(home), "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "spotrun.cli.app", "local", "up", "--time-scale", "0.02"]
    up = subprocess.Popen(
        command, cwd=started_in, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not (home / "spotrun" / "local" / "local.json").exists():
            assert up.poll() is None, up.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "`spotrun local up` wrote no state file under $XDG_STATE_HOME"
            time.sleep(0.1)
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(STATE_HOME_ENV, str(home))
            yield home
    finally:
        up.send_signal(signal.SIGTERM)
        up.communicate(timeout=60)


@pytest.fixture
def elsewhere(state_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The commands are typed in another directory than the one `local up` started in, with no --state-dir."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def manifest(where: Path, steps: int, **changes: Any) -> Path:
    document = yaml.safe_load(EXAMPLE.read_text())
    document["training"]["command"] += ["--steps", str(steps)]
    document.update(changes)
    path = where / f"{document['name']}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def one_object(argv: list[str]) -> tuple[int, dict[str, Any]]:
    """Run ``spotrun ARGV --json``; its stdout must be exactly one JSON object on one line, and nothing else."""
    result = runner.invoke(app, [*argv, "--json"])
    assert result.stdout.count("\n") == 1, (argv, result.stdout, result.stderr)
    assert result.stdout.endswith("\n"), (argv, result.stdout)
    answer = json.loads(result.stdout)
    assert isinstance(answer, dict), (argv, result.stdout)
    return result.exit_code, answer


def ok(argv: list[str]) -> dict[str, Any]:
    code, answer = one_object(argv)
    assert code == 0, (argv, answer)
    return answer


def refused(argv: list[str]) -> dict[str, Any]:
    code, answer = one_object(argv)
    assert code != 0, (argv, answer)
    assert answer["error"]["message"], (argv, answer)
    assert answer["error"]["exit_code"] == code, (argv, answer)
    return answer["error"]


def wait_for(job_id: str, ready: Any, what: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not ready(view := ok(["status", job_id])):
        assert time.monotonic() < deadline, f"{what}: {view['status']}, {view.get('progress')}"
        time.sleep(0.2)
    return view


def test_every_json_command_answers_one_object_on_success_and_on_error(elsewhere: Path) -> None:
    # Given manifests: a short job, a long one, a scheduled one, and broken ones
    short = manifest(elsewhere, steps=20, name="ux-short")
    long = manifest(elsewhere, steps=100_000, name="ux-long")
    nightly = manifest(elsewhere, steps=20, name="ux-nightly", schedule={"expression": "cron(0 3 * * ? *)"})
    broken = elsewhere / "broken.yaml"
    broken.write_text("name: ux-broken\ntraning: {}\n")
    # When every --json command runs, from another directory than `local up`'s and with no --state-dir
    # Then each answers one JSON object: the answer, or {"error": {...}} with the problems
    assert ok(["validate", str(short)])["valid"] is True
    assert "traning: unknown field; did you mean 'training'?" in " ".join(
        refused(["validate", str(broken)])["errors"]
    )
    assert refused(["validate", str(elsewhere / "missing.yaml")])["message"].startswith("cannot read")
    assert refused(["submit", str(broken)])["errors"]
    ended = ok(["submit", str(short), "--wait", "--poll", "0.2"])
    assert ended["status"] == "SUCCEEDED"
    assert ok(["restore", ended["job_id"]])["job_id"] == ended["job_id"]
    refused(["restore", "no-such-job-000"])
    assert ok(["logs", ended["job_id"]])["logs"]
    refused(["logs", "no-such-job-000"])
    refused(["status", "no-such-job-000"])
    refused(["cancel", ended["job_id"]])  # it has ended: 409
    assert ok(["list"])["jobs"]
    assert (
        "no local runtime" in refused(["list", "--target", "local", "--state-dir", str(elsewhere)])["message"]
    )
    assert ok(["local", "pools"])["pools"]
    refused(["local", "pools", "--state-dir", str(elsewhere)])
    assert ok(["local", "instances"])["instances"]
    refused(["local", "instances", "--state-dir", str(elsewhere)])
    refused(["local", "interrupt", "i-0000000000000000"])
    refused(["local", "kill", "i-0000000000000000"])
    refused(["local", "exhaust", "no.such", "us-east-1a"])
    refused(["local", "refill", "no.such", "us-east-1a"])
    refused(["local", "ec2-notfound"])
    refused(["local", "fleet-error", "NoSuchCode.AtAll", "--state-dir", str(elsewhere)])
    ok(["local", "ec2-notfound", "--describe", "0", "--terminate", "1"])
    ok(["local", "ec2-notfound", "--terminate", "0", "--describe", "1"])
    ok(["local", "fleet-error", "InsufficientInstanceCapacity", "--count", "1"])
    ok(["schedule", "create", str(nightly)])
    refused(["schedule", "create", str(short)])  # no schedule block
    assert ok(["schedule", "list"])["schedules"]
    assert "runs" in ok(["schedule", "runs", "ux-nightly"])
    refused(["schedule", "runs", "no-such-schedule"])
    ok(["schedule", "delete", "ux-nightly"])
    refused(["schedule", "delete", "ux-nightly"])
    refused(["simulate", "--traces", str(elsewhere)])  # neither the work nor the deadline
    refused(["demo", "--example", "no-such-example", "--state-dir", str(elsewhere / "demo")])
    # And a long job: interrupted with notice (recovered on a new instance), killed, cancelled
    job_id = ok(["submit", str(long), "--idempotency-key", f"ux-long-{time.time_ns()}"])["job_id"]
    first = wait_for(job_id, lambda v: v["status"] == "TRAINING", "never trained")["attempts"][-1]
    ok(["local", "exhaust", first["instance_type"], first["availability_zone"]])
    ok(["local", "refill", first["instance_type"], first["availability_zone"]])
    ok(["local", "interrupt", first["instance_id"], "--notice-seconds", "5"])
    second = wait_for(
        job_id, lambda v: len(v["attempts"]) == 2 and v["status"] == "TRAINING", "never recovered"
    )["attempts"][-1]
    assert ok(["list", "--name", "ux-long"])["jobs"][0]["recoveries"] == 1
    ok(["local", "kill", second["instance_id"]])
    assert ok(["cancel", job_id])["job"]["status"] == "CANCELLED"


def test_list_and_status_show_where_a_running_job_stands(elsewhere: Path) -> None:
    # Given a long job, training, that has committed a checkpoint
    long = manifest(elsewhere, steps=100_000, name="ux-table")
    job_id = ok(["submit", str(long), "--idempotency-key", f"ux-table-{time.time_ns()}"])["job_id"]
    view = wait_for(
        job_id,
        lambda v: (
            (v.get("progress") or {}).get("checkpoint_step") is not None
            and (v.get("progress") or {}).get("step") is not None
        ),
        "no step and checkpoint in the progress",
    )
    try:
        # When its status is asked once more (timed: its cost runs up to the moment it is computed), and its status
        # and the list are shown to people (plain text: the output is not a terminal)
        asked = datetime.now(UTC)
        view = ok(["status", job_id])
        answered = datetime.now(UTC)
        status = runner.invoke(app, ["status", job_id])
        listed = runner.invoke(app, ["list", "--name", "ux-table"])
    finally:
        ok(["cancel", job_id])
    # Then the status says its step, its last committed checkpoint and how long ago, and its cost so far
    progress = view["progress"]
    assert progress["attempt"] == 1
    # (its instance priced per second from its launch to the moment of the answer, EC2's 60-second minimum first;
    # the figure is rounded to 4 decimals)
    [attempt] = view["attempts"]
    price, launched = attempt["price_per_hour"], datetime.fromisoformat(attempt["started_at"])
    lowest, highest = (price * max(60.0, (at - launched).total_seconds()) / 3600 for at in (asked, answered))
    assert lowest - 0.00005 <= progress["cost_usd"] <= highest + 0.00005, (progress, attempt)
    assert progress["cost_usd"] > 0
    assert progress["checkpoint_committed_at"] is not None
    assert status.exit_code == 0, status.stderr
    assert "now: attempt 1, step " in status.stdout
    assert f"last committed checkpoint step {progress['checkpoint_step']}" in status.stdout.replace("\n", " ")
    assert " ago; cost so far $" in status.stdout.replace("\n", " ")
    # And the list has the columns, with the job's instance type, lifecycle, recoveries, cost and duration
    assert listed.exit_code == 0, listed.stderr
    lines = listed.stdout.splitlines()
    header = next(line for line in lines if "recoveries" in line).split()
    assert header[:9] == [
        "job",
        "name",
        "status",
        "type",
        "lifecycle",
        "recoveries",
        "cost",
        "duration",
        "created",
    ]
    row = next(line for line in lines if job_id in line).split()
    attempt = view["attempts"][0]
    assert row[3:6] == [attempt["instance_type"], "spot", "0"]
    assert row[6].startswith("$")
    assert row[7].isdigit()
    assert row[8] in ("s", "min")
    # And, off a terminal, the tables are plain text: no box drawing to get in the way of grep and awk
    assert not any(ch in listed.stdout + status.stdout for ch in "┃│━─┏")

"""The `spotrun` command without a running emulator: options, errors, and how a finished job is shown."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from spotrun.aws.settings import Settings
from spotrun.cli.app import app
from spotrun.cli.demo import plan_for_example
from spotrun.cli.display.summary import attempt_steps, final_summary
from spotrun.cli.local.control import instances_table
from spotrun.control.views.job_json import job_record
from spotrun.local.control_client import LocalState, read_state, remove_state, write_state
from spotrun.local.demo import EXAMPLE_DIR, example_steps
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import Job, JobStatus, ManifestSource
from spotrun.shape import REPO_ROOT

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
runner = CliRunner()


def attempt(number: int, **fields: object) -> Attempt:
    values: dict[str, object] = {
        "number": number,
        "instance_id": f"i-{number:017x}",
        "instance_type": "g5.xlarge",
        "availability_zone": "us-east-1a",
        "lifecycle": "spot",
        "price_per_hour": 0.3,
        "started_at": NOW + timedelta(minutes=number),
    }
    return Attempt.model_validate(values | fields)


def job_with(*attempts: Attempt) -> Job:
    return Job(
        job_id="tiny-000000000001",
        name="tiny",
        status=JobStatus.SUCCEEDED,
        source=ManifestSource(),
        created_at=NOW,
        updated_at=NOW,
        attempts=list(attempts),
    )


def render(renderable: object) -> str:
    console = Console(width=200, file=io.StringIO())
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def state(workdir: Path, control_url: str, pid: int = 4242) -> LocalState:
    return LocalState(
        pid=pid,
        endpoint_url="http://127.0.0.1:1",
        control_url=control_url,
        time_scale=0.1,
        workdir=str(workdir),
        started_at=NOW,
        settings=Settings(jobs_bucket="spotrun-jobs-local"),
    )


# ------------------------------------------------------------------------------------ spotrun local


def test_local_lists_its_chaos_commands() -> None:
    # Given / When the local group's help is asked for
    result = runner.invoke(app, ["local", "--help"])

    # Then every command is there
    assert result.exit_code == 0
    for command in ("up", "instances", "pools", "interrupt", "kill", "exhaust", "refill"):
        assert command in result.output


@pytest.mark.parametrize(
    "argv",
    [["instances"], ["interrupt", "i-0123456789abcdef0"], ["kill", "i-0123456789abcdef0", "--hang"]],
)
def test_chaos_commands_say_clearly_when_no_runtime_runs(tmp_path: Path, argv: list[str]) -> None:
    # Given a working directory where `local up` never ran
    # When a chaos command is run there
    result = runner.invoke(app, ["local", *argv, "--state-dir", str(tmp_path)])

    # Then it fails with exit code 1, naming the way out
    assert result.exit_code == 1
    assert "no local runtime is running" in result.stderr
    assert "spotrun local up" in result.stderr


def test_a_stale_state_file_is_reported_as_no_runtime(tmp_path: Path) -> None:
    # Given a state file left by a runtime that died (nothing listens on its port)
    write_state(tmp_path, state(tmp_path, f"http://127.0.0.1:{free_port()}"))

    # When a chaos command is run
    result = runner.invoke(app, ["local", "instances", "--state-dir", str(tmp_path)])

    # Then it says the runtime does not answer
    assert result.exit_code == 1
    assert "does not answer" in result.stderr


def test_the_state_file_is_private_and_removed_only_by_its_writer(tmp_path: Path) -> None:
    # Given a state file written by process 4242
    path = write_state(tmp_path, state(tmp_path, "http://127.0.0.1:9"))

    # When another process tries to remove it, then its writer does
    remove_state(tmp_path, pid=1)
    kept = path.exists()
    mode = path.stat().st_mode & 0o777
    read_back = read_state(tmp_path)
    remove_state(tmp_path, pid=4242)

    # Then only the writer's removal took, and the file was readable by its owner only
    assert kept
    assert mode == 0o600
    assert read_back.settings.jobs_bucket == "spotrun-jobs-local"
    assert not path.exists()


def test_the_instances_table_shows_each_notice() -> None:
    # Given instances in each situation
    base = {"instance_type": "g5.xlarge", "availability_zone": "us-east-1a", "lifecycle": "spot"}
    listed = [
        {
            **base,
            "instance_id": "i-a",
            "state": "running",
            "hung": False,
            "rebalance": None,
            "instance_action": None,
        },
        {
            **base,
            "instance_id": "i-b",
            "state": "running",
            "hung": False,
            "rebalance": {"noticeTime": "2025-01-01T12:00:00Z"},
            "instance_action": {"action": "terminate", "time": "2025-01-01T12:02:00Z"},
        },
        {
            **base,
            "instance_id": "i-c",
            "state": "running",
            "hung": True,
            "rebalance": None,
            "instance_action": None,
        },
    ]

    # When they are rendered
    text = render(instances_table(listed))

    # Then the warning, the silent death and the quiet instance read differently
    assert "terminate at 12:02:00 UTC" in text
    assert "hung (silent death)" in text
    assert text.count(" - ") >= 1


# ------------------------------------------------------------------------------------ spotrun demo


def test_demo_refuses_a_negative_number_of_interruptions() -> None:
    # Given / When the demo is asked for -1 interruptions
    result = runner.invoke(app, ["demo", "--interruptions", "-1"])

    # Then the option is refused before anything starts
    assert result.exit_code == 2
    assert "--interruptions" in result.stderr


def test_the_demo_plans_inside_the_examples_run() -> None:
    # Given the example's manifest (its command leaves train.py's 300 steps)
    manifest = (EXAMPLE_DIR / "manifest.yaml").read_bytes()

    # When two interruptions are planned with a seed
    steps = plan_for_example(manifest, 2, seed=3)

    # Then they fall inside steps 30..270, and the same seed plans the same steps
    assert example_steps(manifest) == 300
    assert len(steps) == 2
    assert all(30 <= step <= 270 for step in steps)
    assert steps == plan_for_example(manifest, 2, seed=3)


def test_the_number_of_steps_follows_the_manifests_command() -> None:
    # Given the example's manifest with --steps 1000 added to its command
    text = (EXAMPLE_DIR / "manifest.yaml").read_text()
    longer = text.replace('"0.02"]', '"0.02", --steps, "1000"]')
    assert longer != text

    # When its steps are counted
    # Then the command's value wins
    assert example_steps(longer) == 1000


@pytest.mark.parametrize(("example", "steps"), [("hf-tiny-classifier", 48), ("pytorch-digits", 144)])
def test_the_framework_examples_length_is_their_max_steps(example: str, steps: int) -> None:
    # Given a framework example, whose script counts epochs, not steps: its command's --max-steps is its length
    manifest = (EXAMPLE_DIR.parent / example / "manifest.yaml").read_bytes()
    # When its steps are counted, then the demo plans interruptions within them
    assert example_steps(manifest) == steps
    assert all(step < steps for step in plan_for_example(manifest, 2, seed=1))


# ------------------------------------------------------------------------------------ summary and record


def test_the_summary_totals_the_work_lost_to_interruptions() -> None:
    # Given a job interrupted twice, then completed
    job = job_with(
        attempt(1, ended_at=NOW, end_reason="interrupted", last_step=137, steps_lost=12),
        attempt(
            2,
            ended_at=NOW,
            end_reason="instance-lost",
            checkpoint_restored="jobs/tiny/checkpoints/step-000000000125/",
            restored_step=125,
            last_step=190,
            steps_lost=15,
        ),
        attempt(3, ended_at=NOW, end_reason="completed", restored_step=175, checkpoint_restored="x/"),
    )

    # When its summary is rendered
    text = render(final_summary(job, NOW))

    # Then each attempt shows the steps it covered, and one line totals the loss
    assert "work lost to interruptions: 27 steps over 2 interruptions" in text
    assert "0 → 137" in text
    assert "125 → 190" in text
    assert "175 → end" in text


def test_a_job_without_interruptions_has_no_work_lost_line() -> None:
    # Given a job that completed on its first attempt
    job = job_with(attempt(1, ended_at=NOW, end_reason="completed"))

    # When its summary is rendered
    # Then no loss is mentioned
    assert "work lost" not in render(final_summary(job, NOW))


def test_an_unknown_loss_is_said_so() -> None:
    # Given an interrupted attempt that never reported its loss
    job = job_with(attempt(1, ended_at=NOW, end_reason="heartbeat-timeout"), attempt(2))

    # When its summary is rendered
    text = render(final_summary(job, NOW))

    # Then the total says the loss is unknown for it, and the running attempt reads as running
    assert "work lost to interruptions: 0 steps over 1 interruption (loss unknown for 1 of them)" in text
    assert attempt_steps(job.attempts[1]) == "0 → …"
    assert attempt_steps(job.attempts[0]) == "-"


def test_the_json_record_carries_the_checkpoint_restored_and_steps_lost_of_every_attempt() -> None:
    # Given a job whose first attempt was interrupted and second resumed
    job = job_with(
        attempt(1, ended_at=NOW, end_reason="interrupted", steps_lost=4),
        attempt(2, checkpoint_restored="jobs/tiny/checkpoints/step-000000000100/", restored_step=100),
    )

    # When it becomes the --json record
    record = job_record(job)

    # Then both fields are on every attempt, null where unknown
    assert [(a["checkpoint_restored"], a["steps_lost"]) for a in record["attempts"]] == [
        (None, 4),
        ("jobs/tiny/checkpoints/step-000000000100/", None),
    ]


# ------------------------------------------------------------------------ without the `local` extra

_WITHOUT_EMULATOR = """
import json
import sys


class NoEmulator:
    # Installed without the `local` extra: neither moto nor numpy can be imported.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("moto", "numpy"):
            raise ImportError(f"{name} is not installed")
        return None


def loaded(prefixes):
    return sorted(m for m in sys.modules if m.split(".")[0] in prefixes or m.startswith("spotrun.local"))


sys.meta_path.insert(0, NoEmulator())
from typer.testing import CliRunner

from spotrun.cli.app import app

runner = CliRunner()
helps = [runner.invoke(app, argv) for argv in (["--help"], ["status", "--help"])]
after_help = loaded(("moto", "numpy"))
status = runner.invoke(app, ["status", "--stack", "X", "--region", "eu-west-1"])
print(json.dumps({
    "helps": [(r.exit_code, r.stdout) for r in helps],
    "after_help": after_help,
    "status": (status.exit_code, repr(status.exception), status.stderr),
    "after_status": [m for m in loaded(("moto", "numpy")) if not m.startswith("spotrun.")],
}))
"""


def test_the_api_commands_run_without_the_emulator_installed(tmp_path: Path) -> None:
    # Given a Python where moto and numpy cannot be imported, and no AWS credentials
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "PYTHONPATH": str(REPO_ROOT),
    }
    # When `spotrun --help`, `spotrun status --help` and `spotrun status --stack X` run there
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_EMULATOR], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    # Then both helps print with nothing of the emulator imported, and status gets as far as the credentials
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert [code for code, _ in answer["helps"]] == [0, 0], answer
    assert all("Usage" in text for _, text in answer["helps"]), answer
    assert answer["after_help"] == [], "`spotrun --help` imported the emulator"
    code, _, stderr = answer["status"]
    assert (code, "no AWS credentials" in stderr) == (1, True), answer["status"]
    assert answer["after_status"] == []

"""What people read: did-you-mean for unknown fields, the hint for one string where a list is due, the per-user
local state directory, the list's columns and a running job's progress line, plain tables off a terminal."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotrun.cli.api import jobs_table
from spotrun.cli.app import app
from spotrun.cli.display.output import show
from spotrun.cli.display.summary import progress_text
from spotrun.cli.target import STATE_DIR_ENV, STATE_HOME_ENV, ApiTarget, default_target, local_state_dir
from spotrun.model.manifest.parse import ManifestError, parse_manifest_text

runner = CliRunner()
TRAINING = "training:\n  command: [python, train.py]\n"


def problems(text: str) -> list[str]:
    with pytest.raises(ManifestError) as refused:
        parse_manifest_text(text)
    return refused.value.errors


def test_an_unknown_field_gets_the_closest_name_of_its_own_model_at_every_level() -> None:
    # Given misspelt fields at the top, one level down and two levels down (a list item's model)
    top = problems("name: x\n" + TRAINING + "resorces: {}\n")
    nested = problems("name: x\ntraining:\n  comand: [python, train.py]\n  command: [python]\n")
    deeper = problems(
        "name: x\n" + TRAINING + "data:\n  inputs:\n    - {sorce: 's3://b/p/', destination: d}\n"
    )
    far = problems("name: x\n" + TRAINING + "budget: {zzzz: 1}\n")
    # When they are described, Then each suggests the field of its own model it most likely meant
    assert "resorces: unknown field; did you mean 'resources'? (see `spotrun schema`)" in top
    assert "training.comand: unknown field; did you mean 'command'? (see `spotrun schema`)" in nested
    assert any(
        line.startswith("data.inputs[0].sorce: unknown field; did you mean 'source'?") for line in deeper
    )
    # And a name close to nothing gets no guess
    assert "budget.zzzz: unknown field; check the spelling (see `spotrun schema`)" in far


def test_one_string_where_a_list_is_due_gets_the_list_it_meant() -> None:
    # Given a command written as one shell string, and a GPU name where a list is due
    command = problems("name: x\ntraining:\n  command: python train.py --lr '0.1 0.2'\n")
    gpus = problems("name: x\n" + TRAINING + "resources: {gpu_names: t4}\n")
    # When they are described, Then each says the list to write, split as a shell would
    assert command == [
        'training.command: must be a list, not one string: write ["python", "train.py", "--lr", "0.1 0.2"]'
    ]
    assert gpus == ['resources.gpu_names: must be a list, not one string: write ["t4"]']


def test_validate_json_answers_one_object_valid_or_not(tmp_path: Path) -> None:
    # Given a valid manifest and a misspelt one
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("name: tiny\n" + TRAINING)
    bad.write_text("name: tiny\ntraining:\n  command: python train.py\n")
    # When `validate --json` checks them
    valid = runner.invoke(app, ["validate", str(good), "--json"])
    invalid = runner.invoke(app, ["validate", str(bad), "--json"])
    plain = runner.invoke(app, ["validate", str(bad)])
    # Then stdout is one JSON object each: the verdict, or the error with every problem and the exit code
    assert json.loads(valid.stdout) == {"file": str(good), "valid": True, "name": "tiny", "workdir": None}
    error = json.loads(invalid.stdout)["error"]
    assert invalid.exit_code == error["exit_code"] == 1
    assert error["errors"] == [
        'training.command: must be a list, not one string: write ["python", "train.py"]'
    ]
    # And without --json the same problem goes to stderr only
    assert plain.stdout == ""
    assert 'write ["python", "train.py"]' in plain.stderr


def test_the_local_state_dir_is_per_user_unless_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a state home, then none (the home directory's default)
    monkeypatch.setenv(STATE_HOME_ENV, str(tmp_path / "state"))
    with_state_home = local_state_dir()
    monkeypatch.delenv(STATE_HOME_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    without = local_state_dir()
    # When a directory is given, Then it wins; else the per-user location, never the current directory
    assert local_state_dir(tmp_path / "given") == tmp_path / "given"
    assert with_state_home == tmp_path / "state" / "spotrun" / "local"
    assert without == tmp_path / "home" / ".local" / "state" / "spotrun" / "local"


def test_the_target_is_local_when_the_per_user_state_file_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a state file in the per-user location, and the commands typed in another directory
    monkeypatch.setenv(STATE_HOME_ENV, str(tmp_path / "state"))
    monkeypatch.delenv(STATE_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_target(ApiTarget().workdir) == "aws"
    (tmp_path / "state" / "spotrun" / "local").mkdir(parents=True)
    (tmp_path / "state" / "spotrun" / "local" / "local.json").write_text("{}")
    # When the target is chosen with no option, Then it is the local runtime
    assert default_target(ApiTarget().workdir) == "local"


def test_the_list_shows_type_lifecycle_recoveries_cost_and_duration(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a running job on its second instance, and one that has not started yet
    jobs = [
        {
            "job_id": "tiny-1",
            "name": "tiny",
            "status": "TRAINING",
            "created_at": "2026-12-01T10:00:00+00:00",
            "updated_at": "2026-12-01T10:05:00+00:00",
            "instance_type": "g4dn.xlarge",
            "lifecycle": "spot",
            "recoveries": 1,
            "cost_usd": 0.01234,
            "duration_seconds": 3725.0,
        },
        {
            "job_id": "tiny-2",
            "name": "tiny",
            "status": "ACQUIRING",
            "created_at": "2026-12-01T10:00:00+00:00",
            "updated_at": "2026-12-01T10:00:00+00:00",
            "recoveries": 0,
            "cost_usd": 0.0,
            "duration_seconds": 42.9,
        },
    ]
    # When the list is shown off a terminal
    show(jobs_table(jobs))
    lines = capsys.readouterr().out.splitlines()
    # Then each row has the figures, in plain aligned columns (no box drawing)
    assert lines[1].split()[:8] == [
        "job",
        "name",
        "status",
        "type",
        "lifecycle",
        "recoveries",
        "cost",
        "duration",
    ]
    assert lines[2].split()[:10] == [
        "tiny-1",
        "tiny",
        "TRAINING",
        "g4dn.xlarge",
        "spot",
        "1",
        "$0.0123",
        "1",
        "h",
        "02",
    ]
    assert lines[3].split()[:8] == ["tiny-2", "tiny", "ACQUIRING", "-", "-", "0", "$0.0000", "42"]
    assert not any(ch in "\n".join(lines) for ch in "┃│━─┏")


def test_a_running_jobs_progress_line_says_step_checkpoint_age_and_cost() -> None:
    # Given the progress of a running job whose checkpoint was committed 95 s ago
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    committed = (now - timedelta(seconds=95)).isoformat()
    progress = {
        "attempt": 2,
        "step": 164,
        "checkpoint_step": 150,
        "checkpoint_committed_at": committed,
        "cost_usd": 0.0012,
    }
    # When it is rendered, Then it says where the job stands
    assert progress_text(progress, now).plain == (
        "now: attempt 2, step 164; last committed checkpoint step 150, 1 min 35 s ago; cost so far $0.0012"
    )
    # And before any checkpoint or step, it says so
    assert progress_text({"attempt": 1, "cost_usd": 0.0}, now).plain == (
        "now: attempt 1, no step reported yet; no committed checkpoint yet; cost so far $0.0000"
    )

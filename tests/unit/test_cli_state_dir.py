"""One option name per meaning: ``--workdir`` is a job's code directory, ``--state-dir`` the local runtime's
state directory on every command that finds or starts it; the state directory's former names still work and say
they are deprecated; a target chosen because no state file was found names where it looked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from spotrun.cli import target
from spotrun.cli.app import app
from spotrun.cli.target import STATE_DIR_ENV, ApiTarget

runner = CliRunner()
CODE_DIR_COMMANDS = {"submit", "plan"}  # their --workdir is the job's code
NO_RUNTIME_COMMANDS = {"schema", "validate", "simulate"}  # they never find nor start a local runtime


def commands(
    group: typer.main.TyperGroup | None = None, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, object]]:
    """Every leaf command of the CLI, by its full name (``local instances``), with its click command."""
    group = group or typer.main.get_command(app)
    for name, command in group.commands.items():  # type: ignore[union-attr]
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


def options(command: object, *, hidden: bool) -> dict[str, list[str]]:
    """The options of ``command`` by parameter name: their flags; hidden ones only when asked."""
    return {
        param.name: list(param.opts)
        for param in command.params  # type: ignore[attr-defined]
        if param.param_type_name == "option" and (hidden or not getattr(param, "hidden", False))
    }


@pytest.fixture
def no_aws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS credentials anywhere: the aws target cannot be reached."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_every_command_that_finds_the_local_runtime_names_its_directory_state_dir() -> None:
    # Given every command of the CLI
    found = dict(commands())
    assert {"status", "logs", "attach", "submit", "local up", "local instances", "demo"} <= set(found)
    for name, command in found.items():
        visible = options(command, hidden=False)
        flags = {flag for opts in visible.values() for flag in opts}
        # When its visible options are read
        # Then --workdir is only ever a code directory, --local-workdir is gone from the help, and every command
        # that finds or starts a local runtime offers --state-dir
        assert "--local-workdir" not in flags, name
        assert ("--workdir" in flags) == (name in CODE_DIR_COMMANDS), name
        assert ("--state-dir" in flags) == (name not in NO_RUNTIME_COMMANDS), name


def test_a_wrong_state_dir_is_named_when_the_aws_target_cannot_be_reached(
    tmp_path: Path, no_aws: None
) -> None:
    # Given a directory where no `spotrun local up` runs, and no AWS credentials
    wrong = tmp_path / "not-the-runtime"
    for argv in (["status"], ["logs", "some-job"], ["attach"], ["list"]):
        # When a command is pointed at it
        result = runner.invoke(app, [*argv, "--state-dir", str(wrong)])
        # Then the one error line names the state file it looked for, and how to point elsewhere
        assert result.exit_code == 1, (argv, result.stderr)
        assert result.stderr.count("\n") == 1, result.stderr
        assert f"no `spotrun local up` state file at {wrong / 'local.json'}" in result.stderr
        assert "--state-dir DIR" in result.stderr
        assert "no AWS credentials" in result.stderr


def test_an_explicit_aws_target_is_not_blamed_on_the_state_dir(tmp_path: Path, no_aws: None) -> None:
    # Given no AWS credentials
    # When the aws target is asked for by name
    result = runner.invoke(app, ["status", "--target", "aws", "--state-dir", str(tmp_path)])
    # Then the error is about AWS only: no state file was looked for
    assert result.exit_code == 1
    assert "no AWS credentials found" in result.stderr
    assert "state file" not in result.stderr


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["status", "--workdir"], "--workdir"),
        (["list", "--local-workdir"], "--local-workdir"),
        (["local", "instances", "--workdir"], "--workdir"),
        (["local", "pools", "--local-workdir"], "--local-workdir"),
        (["submit", "{manifest}", "--local-workdir"], "--local-workdir"),
    ],
)
def test_the_state_dirs_former_names_still_work_and_say_they_are_deprecated(
    tmp_path: Path, no_aws: None, monkeypatch: pytest.MonkeyPatch, argv: list[str], flag: str
) -> None:
    # Given a directory where no local runtime runs, named with a former name of --state-dir, and another in
    # the environment (which an option overrides)
    manifest = tmp_path / "job.yaml"
    manifest.write_text("name: tiny\ntraining:\n  command: [python, train.py]\n")
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "from-env"))
    given = tmp_path / "given"
    # When the command runs
    result = runner.invoke(app, [*(a.format(manifest=manifest) for a in argv), str(given)])
    # Then it says the name is deprecated and which to use, and it used the directory given
    assert (
        f"warning: {flag} for the local runtime's state directory is deprecated: use --state-dir"
        in result.stderr
    )
    assert str(given / "local.json") in result.stderr or f"running for {given}" in result.stderr
    assert "from-env" not in result.stderr
    assert result.exit_code == 1, result.stderr


def test_the_deprecated_name_is_used_where_the_command_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a command that only records where its target points
    seen: list[ApiTarget] = []

    def record(given: ApiTarget) -> None:
        seen.append(given)
        raise target.TargetError("stop here")

    monkeypatch.setattr(target, "resolve_client", record)
    # When it is given the state directory by its former name, then by its name
    runner.invoke(app, ["status", "--workdir", str(tmp_path / "old")])
    runner.invoke(app, ["status", "--state-dir", str(tmp_path / "new")])
    # Then each went to the directory given
    assert [t.workdir for t in seen] == [tmp_path / "old", tmp_path / "new"]


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--state-dir", "{a}", "--workdir", "{b}"],
        ["local", "instances", "--local-workdir", "{a}", "--state-dir", "{b}"],
        ["list", "--workdir", "{a}", "--local-workdir", "{b}"],
        ["demo", "--state-dir", "{a}", "--workdir", "{b}"],
    ],
)
def test_two_names_for_the_state_dir_are_refused_never_one_ignored(tmp_path: Path, argv: list[str]) -> None:
    # Given two names of the state directory on one command line
    result = runner.invoke(app, [a.format(a=tmp_path / "a", b=tmp_path / "b") for a in argv])
    # When it runs, Then it is a usage error naming both
    assert result.exit_code == 2, result.stderr
    assert "both name the local runtime's state directory: give only --state-dir" in result.stderr


def test_submits_workdir_is_the_code_and_its_state_dir_the_runtimes(tmp_path: Path, no_aws: None) -> None:
    # Given a manifest, a code directory and a directory where no runtime runs
    manifest = tmp_path / "job.yaml"
    manifest.write_text("name: tiny\ntraining:\n  command: [python, train.py]\n")
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    # When it is submitted with both
    result = runner.invoke(
        app, ["submit", str(manifest), "--workdir", str(code), "--state-dir", str(tmp_path)]
    )
    # Then --workdir is taken as the code (no deprecation), and the state directory is where it looked
    assert result.exit_code == 1
    assert "deprecated" not in result.stderr
    assert f"state file at {tmp_path / 'local.json'}" in result.stderr

"""Usage errors (unknown option, missing argument, bad value) of every command that takes --json: under --json,
stdout is one JSON object, the error, and the exit code stays 2; without --json they are click's, as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from enum import Enum
from typing import Any, Literal, get_origin

import pytest
import typer.main
from typer._click.core import Command
from typer.core import TyperArgument, TyperOption
from typer.testing import CliRunner

from spotrun.cli.app import app

runner = CliRunner()


def commands(command: Command, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Command]]:
    """Every leaf command under ``command``, with the words that name it."""
    if hasattr(command, "commands"):  # a group
        for name, sub in command.commands.items():
            yield from commands(sub, (*path, name))
    else:
        yield path, command


def with_json() -> list[tuple[tuple[str, ...], Command]]:
    return [
        (path, command)
        for path, command in commands(typer.main.get_command(app))
        if any("--json" in getattr(p, "opts", []) for p in command.params)
    ]


def refuses_a_word(option: TyperOption) -> bool:
    """Whether the option's type refuses ``not-a-value!``: a number, an enum, a choice."""
    annotation = option.type_descriptor.annotation
    if get_origin(annotation) is Literal:
        return True
    return annotation in (int, float) or (isinstance(annotation, type) and issubclass(annotation, Enum))


def usage_errors() -> list[Any]:
    """For each command with --json: an unknown option; its required arguments missing; a bad value for each
    option whose type can refuse one."""
    cases = []
    for path, command in with_json():
        name = " ".join(path)
        cases.append(pytest.param([*path, "--no-such-option"], id=f"{name}: unknown option"))
        required = [p for p in command.params if isinstance(p, TyperArgument) and p.required]
        if required:
            cases.append(pytest.param(list(path), id=f"{name}: missing argument"))
        arguments = ["x"] * len(required)
        for param in command.params:
            if isinstance(param, TyperOption) and not param.is_flag and refuses_a_word(param):
                option = param.opts[0]
                cases.append(
                    pytest.param([*path, *arguments, option, "not-a-value!"], id=f"{name}: bad {option}")
                )
    return cases


def test_every_command_with_json_is_covered() -> None:
    # Given the command tree, Then the API commands and the local runtime's are among those checked
    names = {" ".join(path) for path, _ in with_json()}
    assert {"submit", "attach", "status", "list", "logs", "local pools", "schedule list"} <= names


@pytest.mark.parametrize("argv", usage_errors())
def test_a_usage_error_under_json_is_one_json_object_with_exit_2(argv: list[str]) -> None:
    # Given a usage error of a command given --json
    # When it runs
    result = runner.invoke(app, [*argv, "--json"])
    # Then stdout is exactly one JSON object, the error, and the exit code is still 2 (click's line on stderr)
    assert result.exit_code == 2, (argv, result.output, result.stderr)
    assert result.stdout.count("\n") == 1, (argv, result.stdout)
    error = json.loads(result.stdout)["error"]
    assert error["exit_code"] == 2
    assert error["message"]
    assert error["errors"] == []
    assert "Usage:" in result.stderr


def test_without_json_a_usage_error_is_as_before() -> None:
    # Given an unknown option and no --json, When it runs, Then stdout is empty and click says it on stderr
    result = runner.invoke(app, ["list", "--no-such-option"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "No such option: --no-such-option" in result.stderr
    # And a --json after `--` is an argument, not the option
    assert runner.invoke(app, ["cancel", "--", "--json", "extra"]).stdout == ""


def test_an_unknown_command_or_root_option_under_json_is_one_object() -> None:
    # Given a command that does not exist, When it is given --json, Then the error is the one object
    result = runner.invoke(app, ["no-such-command", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["message"] == "No such command 'no-such-command'."
    # And so is --json given to the root command, which has no such option
    result = runner.invoke(app, ["--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["message"] == "No such option: --json"

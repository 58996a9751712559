"""`make test`'s recipe as make plans it (a dry run: nothing is installed, linted or tested)."""

from __future__ import annotations

import os
import subprocess

from spotrun.shape import REPO_ROOT


def make(*args: str, **environment: str) -> list[str]:
    """What ``make`` prints for these arguments, one line each, run as from a shell with ``environment`` added."""
    # Run from `make test` itself, the parent's flags and level would reach this make: run as from a shell.
    env = {key: value for key, value in os.environ.items() if key not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}}
    done = subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=REPO_ROOT,
        env=env | environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def planned(*args: str) -> list[str]:
    """The commands ``make -n`` prints for these arguments (a dry run; a recursive make is dry-run too)."""
    return make("-n", *args)


def test_a_fresh_install_leaves_byte_compiling_to_each_modules_first_import():
    # Given a pyproject.toml newer than the install's stamp, as on a fresh clone (-W)
    # When make plans the dev install
    lines = planned("-W", "pyproject.toml", ".venv/.installed-dev")

    # Then the project and its dev extra are installed without pip compiling every module of every package
    [install] = [line for line in lines if "pip install" in line and "-e " in line]
    assert "'.[dev]'" in install
    assert "--no-compile" in install.split()


def test_the_recipes_write_bytecode_even_where_the_machine_forbids_it():
    # Given a machine whose environment tells Python never to write bytecode
    # When a recipe of the Makefile prints what it sees of that variable (a target added for the probe only)
    [seen] = make(
        "-s",
        "--eval",
        'bytecode-probe: ; @echo "[$$PYTHONDONTWRITEBYTECODE]"',
        "bytecode-probe",
        PYTHONDONTWRITEBYTECODE="1",
    )

    # Then the recipes do not inherit it: each module is compiled once, at its first import, and cached
    assert seen == "[]"


def test_the_linters_and_mypy_run_side_by_side_and_before_any_test():
    # When make plans `make test`
    lines = planned("test")

    # Then one recursive make runs lint and typecheck on two jobs, each one's output kept together
    [checks] = [index for index, line in enumerate(lines) if "lint typecheck" in line]
    assert {"-j2", "--output-sync=target"} <= set(lines[checks].split())
    # ...and all the tests come after it (a failing check stops the recipe there)
    tests = [index for index, line in enumerate(lines) if "-m pytest" in line]
    assert len(tests) == 3
    assert min(tests) > checks
    # ...with the checks themselves: ruff, the layer contracts and mypy
    planned_checks = "\n".join(lines[checks + 1 : min(tests)])
    for tool in ("ruff check", "ruff format --check", "lint-imports", "mypy"):
        assert tool in planned_checks, tool

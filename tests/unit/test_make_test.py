"""`make test`'s recipe as make plans it (a dry run: nothing is installed, linted or tested)."""

from __future__ import annotations

import ast
import importlib.util
import io
import os
import subprocess
from pathlib import Path

from mypy.config_parser import parse_config_file
from mypy.options import Options

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


def imported_modules(paths: list[str], package: str) -> set[str]:
    """Every module of ``package`` the Python files under ``paths`` import (``from P import m`` counts ``P.m``)."""
    found: set[str] = set()
    for path in paths:
        for source in (REPO_ROOT / path).rglob("*.py"):
            for node in ast.walk(ast.parse(source.read_text(), str(source))):
                if isinstance(node, ast.Import):
                    found |= {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    # A name imported from a package is one of its modules when the package has a module of that name (found
    # on disk: importing the CDK would start its jsii runtime).
    spec = importlib.util.find_spec(package)
    assert spec is not None, package
    [root] = [Path(location) for location in spec.submodule_search_locations or []]

    def is_module(name: str) -> bool:
        relative = Path(*name.split(".")[1:])
        return name == package or (root / relative).is_dir() or (root / relative).with_suffix(".py").is_file()

    return {name for name in found if name.split(".")[0] == package and is_module(name)}


def test_mypy_analyses_every_cdk_module_the_code_imports_and_skips_the_rest():
    # Given what `make typecheck` checks, and mypy's own reading of the project's configuration
    [command] = [line for line in planned("typecheck") if "mypy" in line]
    targets = command.split()[1:]
    options = Options()
    parse_config_file(options, None, str(REPO_ROOT / "pyproject.toml"), io.StringIO(), io.StringIO())

    # When each CDK module those files import is looked up
    used = imported_modules(targets, "aws_cdk")

    # Then mypy follows every one of them (their calls are type-checked) ...
    assert {"aws_cdk", "aws_cdk.aws_lambda", "aws_cdk.aws_ec2"} <= used
    not_followed = sorted(name for name in used if options.clone_for_module(name).follow_imports != "normal")
    assert not not_followed, f"add these to the aws_cdk list of [tool.mypy.overrides]: {not_followed}"
    # ... and none of the CDK modules nothing imports, which only the used ones reach (most of a cold run)
    assert options.clone_for_module("aws_cdk.aws_sagemaker").follow_imports == "skip"
    assert options.clone_for_module("aws_cdk.aws_networkfirewall").follow_imports == "skip"

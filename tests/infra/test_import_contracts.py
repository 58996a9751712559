"""The layer contracts in pyproject.toml catch what they promise (docs: architecture/index.md).

Each case plants one import against the direction in a copy of the sources and runs ``lint-imports`` there: the
contract named must break. The unchanged copy must pass, so the check fails both ways.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spotrun.shape import REPO_ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
SOURCES = ("spotrun", "functions", "infra", "pyproject.toml")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("contracts")
    for name in SOURCES:
        source = REPO_ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, root / name)
    return root


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_sources_as_they_are_keep_every_contract(pristine: Path) -> None:
    # When the contracts are checked on the unchanged sources
    result = lint_imports(pristine)

    # Then none is broken
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        ("spotrun/control/views/job_json.py", "import rich", "The Lambda bundle imports no"),
        ("spotrun/shape.py", "import typer", "The Lambda bundle imports no"),
        ("functions/acquire.py", "import moto", "The Lambda bundle imports no"),
        ("spotrun/aws/adapters.py", "import spotrun.agent.transfer.download", "The Lambda bundle imports no"),
        ("spotrun/model/job/record.py", "import spotrun.control.store", "Layers"),
        ("spotrun/control/capacity/acquire.py", "import spotrun.aws.adapters", "Layers"),
        ("spotrun/local/demo.py", "import spotrun.cli.display.summary", "Layers"),
        (
            "spotrun/agent/step_runner.py",
            "import spotrun.control.dispatch",
            "The instance agent never reaches",
        ),
        ("spotrun/model/capacity/pricing.py", "import boto3", "The model is pure"),
        ("spotrun/training/__init__.py", "import pydantic", "The training helpers run under any interpreter"),
        (
            "spotrun/cli/client.py",
            "import spotrun.local.control_client",
            "The API client is told where to go",
        ),
        ("infra/stack.py", "import spotrun.local.runtime", "The CDK app builds from the shape"),
        ("spotrun/local/clock.py", "import spotrun.local.runtime", "No import cycles"),
        (
            "spotrun/model/manifest/schema.py",
            "import spotrun.model.job.record",
            "Model: manifest, then capacity",
        ),
        (
            "spotrun/model/job/record.py",
            "import spotrun.model.deadline.state",
            "Model: manifest, then capacity",
        ),
        ("spotrun/agent/transfer/upload.py", "import spotrun.agent.steps.stage", "Agent: the steps, then"),
        (
            "spotrun/control/capacity/release.py",
            "import spotrun.control.views.jobs",
            "Control: the API's views",
        ),
        (
            "spotrun/local/capacity/pools.py",
            "import spotrun.local.patches.ec2",
            "Emulator: the runtime, then",
        ),
    ],
)
def test_an_import_against_the_direction_breaks_its_contract(
    pristine: Path, tmp_path: Path, module: str, planted: str, contract: str
) -> None:
    # Given a copy of the sources with one import planted against the direction
    root = tmp_path / "planted"
    shutil.copytree(pristine, root)
    target = root / module
    target.write_text(target.read_text() + f"\n{planted}  # planted by the test\n")

    # When the contracts are checked
    result = lint_imports(root)

    # Then the check fails, and the contract that says so is the one meant
    assert result.returncode != 0
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(line.startswith(contract) for line in broken), result.stdout

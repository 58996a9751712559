"""Every deployed handler imports from the Lambda package as infra/ builds it, alone, with only what Lambda provides.

The dev virtualenv holds rich, typer, moto and the whole project, on another Python, so importing a handler there
proves nothing about the deployed function. Here the package is built by the bundler CDK uses
(``infra/constructs/control_plane/bundling``), and each handler is imported in its own process
(``tests/infra/bundle_probe``) of a virtualenv that holds only what a function finds in AWS
(:mod:`infra.lambda_env`): the runtime's Python (``LAMBDA_PYTHON``), the public Powertools layer's packages and
the runtime's SDK. The virtualenv is built once and cached under ``.cache/`` keyed by those pins
(``make lambda-venv``, which ``make test`` runs first), so later runs take seconds. No Python of the runtime's
version on the machine fails these tests: it is never a skip.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from infra import lambda_env
from infra.constructs.control_plane.bundling import CopyBundler, lambda_trees
from infra.constructs.control_plane.functions import POWERTOOLS_LAYER
from spotrun.shape import SHAPE
from tests.infra.bundle_probe import import_each_alone
from tests.infra.conftest import Synthesized

# Never in a deployed function: the CLI's libraries and the emulator's.
FORBIDDEN = (
    "rich",
    "typer",
    "moto",
    "spotrun.local",
    "spotrun.cli.app",
    "spotrun.cli.display.summary",
    "spotrun.cli.client",
)


@pytest.fixture(scope="session")
def lambda_python() -> Path:
    return lambda_env.lambda_python()


@pytest.fixture(scope="session")
def lambda_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lambda-package")
    assert CopyBundler(lambda_trees()).try_bundle(str(out))
    return out


def test_the_lambda_package_leaves_out_the_cli_the_demo_the_client_and_the_emulator(lambda_package):
    # Given the Lambda package as infra/ builds it
    shipped = {path.relative_to(lambda_package).as_posix() for path in lambda_package.rglob("*.py")}
    # Then it ships the handlers and the core, and none of the modules only a person's machine runs
    assert {
        "functions/api/app.py",
        "spotrun/control/views/job_json.py",
        "spotrun/model/job/record.py",
        "yaml/__init__.py",
    } <= shipped
    left_out = {
        "spotrun/cli/app.py",
        "spotrun/cli/display/summary.py",
        "spotrun/cli/client.py",
        "spotrun/local/demo.py",
    }
    assert not left_out & shipped
    assert not [path for path in shipped if path.startswith("spotrun/local/")]


@pytest.mark.timeout(900)  # the first run builds the virtualenv (under a minute); later runs reuse it
def test_every_handler_imports_alone_on_the_runtimes_python_with_only_the_layer_and_the_runtimes_sdk(
    lambda_python, lambda_package
):
    # Given the Lambda package and a virtualenv of the runtime's Python, the Powertools layer's packages and the
    # runtime's SDK
    handlers = [spec.handler for spec in SHAPE.functions]

    # When each declared handler is imported there, each in its own process
    results = import_each_alone(lambda_python, lambda_package, handlers)

    # Then each ran on the runtime's Python and SDK, imported, and loaded nothing of the CLI or the emulator and
    # nothing from outside the package and the virtualenv
    assert {(r["python"], r["boto3"], r["botocore"]) for r in results.values()} == {
        (lambda_env.LAMBDA_PYTHON, lambda_env.RUNTIME_BOTO3, lambda_env.RUNTIME_BOTOCORE)
    }
    failures = {name: result["error"] for name, result in results.items() if result["error"]}
    assert failures == {}
    base = subprocess.run(
        [str(lambda_python), "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True
    ).stdout.strip()
    for name, result in results.items():
        forbidden = [m for m in result["loaded"] if m.split(".")[0] in FORBIDDEN or m.startswith(FORBIDDEN)]
        assert forbidden == [], name
        outside = [
            f
            for f in result["loaded"].values()
            if f and not f.startswith((str(lambda_package), str(lambda_python.parent.parent), base))
        ]
        assert outside == [], name


def _package_with_an_import_order_dependency(root: Path) -> Path:
    """Two handlers: ``second`` uses ``functions.helpers`` without importing it, ``first`` imports it."""
    (root / "functions").mkdir(parents=True)
    (root / "functions" / "__init__.py").write_text("")
    (root / "functions" / "helpers.py").write_text("def handle(event, context):\n    return event\n")
    (root / "functions" / "first.py").write_text(
        "from functions import helpers\n\nhandler = helpers.handle\n"
    )
    # The attribute ``functions.helpers`` exists only once some import has loaded that submodule.
    (root / "functions" / "second.py").write_text("import functions\n\nhandler = functions.helpers.handle\n")
    return root


def test_a_handler_that_imports_only_because_another_handler_was_imported_first_fails(
    lambda_python, tmp_path
):
    # Given a package whose second handler works only after the first one's import
    package = _package_with_an_import_order_dependency(tmp_path / "task")
    handlers = ["functions.first.handler", "functions.second.handler"]
    # (in one interpreter importing both in turn, as this test once did, the second imports: the dependency hides)
    together = subprocess.run(
        [str(lambda_python), "-c", "import functions.first, functions.second; print('imported')"],
        cwd=package,
        env=lambda_env.init_environment(package, tmp_path, ""),
        capture_output=True,
        text=True,
    )
    assert together.stdout.strip() == "imported", together.stderr

    # When each is imported alone
    results = import_each_alone(lambda_python, package, handlers)

    # Then the first imports and the second fails, as it would on AWS
    assert results["functions.first.handler"]["error"] is None
    assert "AttributeError" in (results["functions.second.handler"]["error"] or "")


def test_no_python_of_the_runtimes_version_fails_naming_it_rather_than_skipping():
    # Given a runtime version no machine has
    # When its interpreter is looked for
    with pytest.raises(lambda_env.RuntimeInterpreterMissing) as missing:
        lambda_env.runtime_interpreter("3.99")
    # Then the error names the version and how to get it
    assert "no Python 3.99" in str(missing.value)
    assert "pyenv install 3.99" in str(missing.value)


def test_the_interpreter_found_is_the_runtimes_version():
    # Given this machine (the CI machine is the same image)
    # When the runtime's interpreter is looked for
    python = lambda_env.runtime_interpreter()
    # Then it runs and is that version, whatever the pyenv global version is
    reported = subprocess.run([str(python), "--version"], capture_output=True, text=True, check=True).stdout
    assert reported.startswith(f"Python {lambda_env.LAMBDA_PYTHON}."), reported


def test_the_functions_deploy_on_the_python_the_bundle_is_tested_on(synthesized: Synthesized):
    # Given the synthesized stack's functions
    functions = synthesized.marked("function")
    # Then each runs on python<LAMBDA_PYTHON> with the Powertools layer built for that Python
    tag = lambda_env.LAMBDA_PYTHON.replace(".", "")
    assert f"-python{tag}-" in POWERTOOLS_LAYER
    for spec in SHAPE.functions:
        props = synthesized.properties(functions[spec.name])
        assert props["Runtime"] == f"python{lambda_env.LAMBDA_PYTHON}", spec.name
        assert POWERTOOLS_LAYER in json.dumps(props["Layers"]), spec.name


def test_the_runtime_not_being_the_latest_is_acknowledged_with_its_reason(synthesized: Synthesized):
    # Given the synthesized stack's functions (cdk-nag writes acknowledgments into their metadata)
    functions = synthesized.marked("function")
    for spec in SHAPE.functions:
        metadata = json.dumps(synthesized.template["Resources"][functions[spec.name]].get("Metadata", {}))
        # Then AwsSolutions-L1 is acknowledged on each, saying why
        assert "AwsSolutions-L1" in metadata, spec.name
        assert "newest Python runtime that can be tested" in metadata, spec.name

"""Every deployed handler imports from the Lambda package as infra/ builds it, with only what Lambda provides.

The dev virtualenv holds rich, typer, moto and the whole project, so importing a handler there proves nothing
about the deployed function. Here the package is built by the bundler CDK uses (``infra/constructs/bundling``),
and each handler is imported in a subprocess of a virtualenv that holds only what a function finds in AWS:

- the public Powertools layer: ``pip install "aws-lambda-powertools[all]==<version>"``, less boto3 and its
  dependencies (the layer's build: aws-powertools/powertools-lambda-python ``layer_v3/docker/Dockerfile``);
- the runtime's boto3 (https://docs.aws.amazon.com/lambda/latest/dg/lambda-python.html).

The virtualenv (:mod:`infra.lambda_env`, shared with ``make bench``) is built once and cached under ``.cache/``
keyed by those pins, so later runs take seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from infra import lambda_env
from infra.constructs.bundling import CopyBundler, lambda_trees
from spotrun.shape import SHAPE

# Never in a deployed function: the CLI's libraries and the emulator's.
FORBIDDEN = (
    "rich",
    "typer",
    "moto",
    "spotrun.local",
    "spotrun.cli.app",
    "spotrun.cli.summary",
    "spotrun.cli.client",
)

_PROBE = """
import importlib, json, sys
result = {}
for dotted in sys.argv[1:]:
    before = set(sys.modules)
    module, _, attribute = dotted.rpartition(".")
    try:
        handler = getattr(importlib.import_module(module), attribute)
        error = None if callable(handler) else "not callable"
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
    loaded = {name: getattr(sys.modules[name], "__file__", None) for name in set(sys.modules) - before}
    result[dotted] = {"error": error, "loaded": loaded}
print(json.dumps(result))
"""


@pytest.fixture(scope="session")
def lambda_python() -> Path:
    return lambda_env.lambda_python()


@pytest.fixture(scope="session")
def lambda_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lambda-package")
    assert CopyBundler(lambda_trees()).try_bundle(str(out))
    return out


def imported_handlers(python: Path, package: Path, handlers: list[str]) -> dict[str, dict]:
    """Import each handler from ``package`` in a fresh interpreter, as Lambda does from /var/task."""
    # A function's environment at init (tracing on, as deployed): no PYTHONPATH but the package, no user site,
    # nothing of this process's environment (handlers read no setting on import)
    with tempfile.TemporaryDirectory(prefix="lambda-tmp-") as tmp:
        done = subprocess.run(
            [str(python), "-c", _PROBE, *handlers],
            cwd=package,
            env=lambda_env.init_environment(package, Path(tmp), os.environ.get("PATH", "")),
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_lambda_package_leaves_out_the_cli_the_demo_the_client_and_the_emulator(lambda_package):
    # Given the Lambda package as infra/ builds it
    shipped = {path.relative_to(lambda_package).as_posix() for path in lambda_package.rglob("*.py")}
    # Then it ships the handlers and the core, and none of the modules only a person's machine runs
    assert {
        "functions/api/app.py",
        "spotrun/control/records.py",
        "spotrun/model/job.py",
        "yaml/__init__.py",
    } <= shipped
    left_out = {
        "spotrun/cli/app.py",
        "spotrun/cli/summary.py",
        "spotrun/cli/client.py",
        "spotrun/local/demo.py",
    }
    assert not left_out & shipped
    assert not [path for path in shipped if path.startswith("spotrun/local/")]


@pytest.mark.timeout(900)  # the first run builds the virtualenv (about half a minute); later runs reuse it
def test_every_handler_imports_from_the_bundle_with_only_the_layer_and_the_runtime(
    lambda_python, lambda_package
):
    # Given the Lambda package and a virtualenv of the Powertools layer's packages and boto3
    handlers = [spec.handler for spec in SHAPE.functions]

    # When each declared handler is imported there
    results = imported_handlers(lambda_python, lambda_package, handlers)

    # Then each imports, loads nothing of the CLI or the emulator, and nothing from outside the two
    failures = {name: result["error"] for name, result in results.items() if result["error"]}
    assert failures == {}
    for name, result in results.items():
        forbidden = [m for m in result["loaded"] if m.split(".")[0] in FORBIDDEN or m.startswith(FORBIDDEN)]
        assert forbidden == [], name
        outside = [
            f
            for f in result["loaded"].values()
            if f
            and not f.startswith((str(lambda_package), str(lambda_python.parent.parent), sys.base_prefix))
        ]
        assert outside == [], name

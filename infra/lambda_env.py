"""What a deployed function runs in, rebuilt on this machine: the layer's virtualenv and the environment at init.

Two things stand in for AWS when a handler is imported here (``tests/infra/test_bundle_imports.py``,
``tests/unit/test_cold_start.py``, ``make bench``'s cold-start section):

- :func:`lambda_python`: a virtualenv that holds only what a function finds in AWS, the public Powertools layer
  (``pip install "aws-lambda-powertools[all]==<version>"``, as the layer's build does:
  aws-powertools/powertools-lambda-python ``layer_v3/docker/Dockerfile``) and the runtime's boto3
  (https://docs.aws.amazon.com/lambda/latest/dg/lambda-python.html). The project's dev virtualenv also holds
  moto, hypothesis, rich and pydantic plugins found through entry points, none of which Lambda has. It is built
  once per set of pins under ``.cache/lambda-venv/<key>/`` and reused.
- :func:`init_environment`: the variables a function has when Lambda imports its handler, Lambda's own
  (https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html, "Defined runtime environment
  variables") and :data:`FUNCTION_ENVIRONMENT`, the ones ``infra/constructs/functions.py`` sets on every
  function. The ``SPOTRUN_*`` settings are left out: they are read at the first invocation, never at import.

No CDK module is imported here, so tests and the bench use it without starting jsii.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

from spotrun.shape import METRICS_NAMESPACE, REPO_ROOT, SERVICE_NAME

# What infra sets on every function (infra/constructs/functions.py passes it as the function's environment).
FUNCTION_ENVIRONMENT = {
    "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
    "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
}
# Where the virtualenvs are kept, one per set of pins.
VENV_CACHE = REPO_ROOT / ".cache" / "lambda-venv"


def layer_requirements() -> list[str]:
    """What the layer and the runtime hold, at the project's pins: Powertools with all extras, pydantic, boto3."""
    dependencies = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [powertools] = [d for d in dependencies if d.startswith("aws-lambda-powertools")]
    pin = re.fullmatch(r"aws-lambda-powertools(\[[^]]*\])?==(?P<version>[\w.]+)", powertools)
    if pin is None:
        raise ValueError(
            f"the Powertools dependency must be pinned exactly (the layer matches it): {powertools}"
        )
    [pydantic] = [d for d in dependencies if d.startswith("pydantic")]
    return [f"aws-lambda-powertools[all]=={pin['version']}", pydantic, f"boto3=={version('boto3')}"]


def lambda_venv(requirements: list[str]) -> Path:
    """The interpreter of a virtualenv holding ``requirements`` only, built once per set of pins.

    Parameters
    ----------
    requirements
        pip requirement strings; with this interpreter's version they make the cache key.

    Returns
    -------
    Path
        ``.cache/lambda-venv/<key>/bin/python``.
    """
    key = hashlib.sha256(json.dumps([sys.version, *requirements]).encode()).hexdigest()[:16]
    root = VENV_CACHE / key
    python = root / "bin" / "python"
    done = root / ".complete"
    if not done.is_file():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *requirements],
            check=True,
            timeout=600,
        )
        done.write_text("\n".join(requirements) + "\n")
    return python


def lambda_python() -> Path:
    """The interpreter of the Lambda layer's virtualenv at the project's pins (:func:`lambda_venv`)."""
    return lambda_venv(layer_requirements())


def init_environment(task_root: Path, tmp: Path, path: str) -> dict[str, str]:
    """The environment of a function's init, for a child that imports a handler from ``task_root``.

    Parameters
    ----------
    task_root
        The Lambda package (``/var/task`` on AWS): the only entry of ``PYTHONPATH``.
    tmp
        A scratch directory standing for Lambda's ``/tmp`` (the X-Ray SDK writes a file there at import).
    path
        ``PATH`` for the child.

    Returns
    -------
    dict
        Nothing of the calling process's environment beyond ``path``: no user site, no credentials.
    """
    return {
        "PATH": path,
        "PYTHONPATH": str(task_root),
        "PYTHONNOUSERSITE": "1",
        "LANG": "en_US.UTF-8",
        "TZ": ":UTC",
        # With LAMBDA_TASK_ROOT set, Powertools' Tracer is enabled and the X-Ray SDK takes its Lambda context,
        # as under active tracing (infra/constructs/functions.py: Tracing.ACTIVE).
        "LAMBDA_TASK_ROOT": str(task_root),
        "AWS_LAMBDA_FUNCTION_NAME": "spotrun-probe",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_EXECUTION_ENV": f"AWS_Lambda_python{sys.version_info.major}.{sys.version_info.minor}",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
        "AWS_XRAY_DAEMON_ADDRESS": "169.254.79.129:2000",
        "TMPDIR": str(tmp),
        **FUNCTION_ENVIRONMENT,
    }

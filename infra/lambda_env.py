"""What a deployed function runs in, rebuilt on this machine: the runtime's interpreter, the layer's virtualenv and
the environment at init.

Three things stand in for AWS when a handler is imported here (``tests/infra/test_bundle_imports.py``,
``tests/unit/test_cold_start.py``, ``make bench``'s cold-start section):

- :data:`LAMBDA_PYTHON`: the Python of the functions' runtime (``infra/constructs/control_plane/functions.py`` deploys
  ``python<LAMBDA_PYTHON>``), found on this machine by :func:`runtime_interpreter`. Lambda's newest runtime,
  ``python3.14``, cannot be installed on the project's machines (pyenv has 3.12 and 3.13, and no network but
  the package registries), so the functions deploy on the newest one that can be tested here; cdk-nag's
  AwsSolutions-L1 (not the latest runtime) is acknowledged with that reason.
- :func:`lambda_python`: a virtualenv of that interpreter holding only what a function finds in AWS, the public
  Powertools layer (``pip install "aws-lambda-powertools[all]==<version>"``, as the layer's build does:
  aws-powertools/powertools-lambda-python ``layer_v3/docker/Dockerfile``, which then deletes boto3 and its
  dependencies) and the runtime's SDK, :data:`RUNTIME_BOTO3` and :data:`RUNTIME_BOTOCORE`. The project's dev
  virtualenv also holds moto, hypothesis, rich and pydantic plugins found through entry points, none of which
  Lambda has. It is built once per set of pins under ``.cache/lambda-venv/<key>/`` and reused.
- :func:`init_environment`: the variables a function has when Lambda imports its handler, Lambda's own
  (https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html, "Defined runtime environment
  variables") and :data:`FUNCTION_ENVIRONMENT`, the ones ``infra/constructs/control_plane/functions.py`` sets on every
  function. The ``SPOTRUN_*`` settings are left out: they are read at the first invocation, never at import.

No CDK module is imported here, so tests and the bench use it without starting jsii.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

from spotrun.shape import METRICS_NAMESPACE, REPO_ROOT, SERVICE_NAME

# The functions' runtime is python<LAMBDA_PYTHON>; infra/constructs/control_plane/functions.py deploys it and the
# layer built for it, and tests/infra/test_functions_and_workflow.py checks the template says the same.
LAMBDA_PYTHON = "3.13"
# The SDK the runtime provides (functions use it: the Powertools layer deletes its own boto3). AWS names no
# fixed version: "The version of the AWS SDK included in the Python runtime depends on the runtime version and
# your AWS Region", found by deploying a function that prints boto3.__version__
# (https://docs.aws.amazon.com/lambda/latest/dg/lambda-python.html#python-sdk-included), and Lambda updates it
# in place. So the imports are tested against the oldest SDK the project accepts (pyproject.toml: boto3>=1.40):
# an SDK older than that in some Region is a deployment the project does not support, and anything newer is
# backward compatible with what this one imports.
RUNTIME_BOTO3 = "1.40.0"
RUNTIME_BOTOCORE = "1.40.0"
# What infra sets on every function (infra/constructs/control_plane/functions.py passes it as the function's
# environment).
FUNCTION_ENVIRONMENT = {
    "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
    "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
}
# Where the virtualenvs are kept, one per interpreter and set of pins.
VENV_CACHE = REPO_ROOT / ".cache" / "lambda-venv"


class RuntimeInterpreterMissing(RuntimeError):
    """No Python of the functions' runtime version on this machine: what ships cannot be tested here."""


def _version_of(python: str) -> str | None:
    """``sys.version`` of an interpreter, or None when it does not run (a pyenv shim of another version)."""
    try:
        done = subprocess.run(
            [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, timeout=60
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _candidates(version: str) -> list[str]:
    """Where an interpreter of ``version`` may be: pyenv's answer, then ``PATH``, then pyenv's directories."""
    found = []
    pyenv = shutil.which("pyenv")
    if pyenv:
        prefix = subprocess.run([pyenv, "prefix", version], capture_output=True, text=True, timeout=60)
        if prefix.returncode == 0 and prefix.stdout.strip():
            found.append(str(Path(prefix.stdout.strip().splitlines()[0]) / "bin" / f"python{version}"))
    on_path = shutil.which(f"python{version}")
    if on_path:
        found.append(on_path)
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    found += sorted((str(p) for p in root.glob(f"versions/{version}.*/bin/python{version}")), reverse=True)
    return found


def runtime_interpreter(version: str = LAMBDA_PYTHON) -> Path:
    """The base interpreter of Python ``version`` on this machine.

    Parameters
    ----------
    version
        ``major.minor``, the functions' runtime by default.

    Returns
    -------
    Path
        An interpreter that runs and reports that version (a pyenv shim of another version does not count).

    Raises
    ------
    RuntimeInterpreterMissing
        When none is found: the bundle would otherwise be tested on a Python it does not deploy on.
    """
    tried = _candidates(version)
    for python in tried:
        reported = _version_of(python)
        if reported is not None and reported.startswith(f"{version}."):
            return Path(python)
    raise RuntimeInterpreterMissing(
        f"no Python {version} (the Lambda functions' runtime, infra.lambda_env.LAMBDA_PYTHON) on this machine; "
        f"tried {tried or 'pyenv, PATH and ~/.pyenv/versions'}: install it (e.g. `pyenv install {version}`) "
        "so the bundle is tested on the interpreter it deploys on"
    )


def layer_requirements() -> list[str]:
    """What the layer and the runtime hold, at the project's pins: Powertools with all extras, pydantic, the SDK."""
    dependencies = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [powertools] = [d for d in dependencies if d.startswith("aws-lambda-powertools")]
    pin = re.fullmatch(r"aws-lambda-powertools(\[[^]]*\])?==(?P<version>[\w.]+)", powertools)
    if pin is None:
        raise ValueError(
            f"the Powertools dependency must be pinned exactly (the layer matches it): {powertools}"
        )
    [pydantic] = [d for d in dependencies if d.startswith("pydantic")]
    return [
        f"aws-lambda-powertools[all]=={pin['version']}",
        pydantic,
        f"boto3=={RUNTIME_BOTO3}",
        f"botocore=={RUNTIME_BOTOCORE}",
    ]


def lambda_venv(requirements: list[str], base: Path) -> Path:
    """The interpreter of a virtualenv of ``base`` holding ``requirements`` only, built once per set of pins.

    Parameters
    ----------
    requirements
        pip requirement strings; with ``base``'s full version they make the cache key.
    base
        The interpreter the virtualenv is made from.

    Returns
    -------
    Path
        ``.cache/lambda-venv/<key>/bin/python``.
    """
    key = hashlib.sha256(json.dumps([_version_of(str(base)), *requirements]).encode()).hexdigest()[:16]
    root = VENV_CACHE / key
    python = root / "bin" / "python"
    done = root / ".complete"
    VENV_CACHE.mkdir(parents=True, exist_ok=True)
    # One builder at a time (two pytest workers, or a test run beside `make bench`); the others wait, then reuse.
    with (VENV_CACHE / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            subprocess.run([str(base), "-m", "venv", "--clear", str(root)], check=True)
            subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    *requirements,
                ],
                check=True,
                timeout=600,
            )
            done.write_text("\n".join(requirements) + "\n")
    return python


def lambda_python() -> Path:
    """The interpreter of the Lambda layer's virtualenv: :data:`LAMBDA_PYTHON` with :func:`layer_requirements`.

    Raises
    ------
    RuntimeInterpreterMissing
        When this machine has no Python of the runtime's version.
    """
    return lambda_venv(layer_requirements(), runtime_interpreter())


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
        # as under active tracing (infra/constructs/control_plane/functions.py: Tracing.ACTIVE).
        "LAMBDA_TASK_ROOT": str(task_root),
        "AWS_LAMBDA_FUNCTION_NAME": "spotrun-probe",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_EXECUTION_ENV": f"AWS_Lambda_python{LAMBDA_PYTHON}",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_XRAY_CONTEXT_MISSING": "LOG_ERROR",
        "AWS_XRAY_DAEMON_ADDRESS": "169.254.79.129:2000",
        "TMPDIR": str(tmp),
        **FUNCTION_ENVIRONMENT,
    }


if __name__ == "__main__":
    # `make lambda-venv`: build (or find) the virtualenv and say where it is.
    print(lambda_python())

"""Import one handler in a fresh interpreter, as Lambda imports it at a function's init.

Each handler gets its own process: one interpreter that imported every handler in turn would let a handler use
a module only an earlier one loaded (``import functions`` then ``functions.helpers.x``, a submodule attribute set
by someone else's import), which passes there and fails on AWS, where an environment imports one handler.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from infra import lambda_env

# Run in the child: import the handler, then report what it loaded and what it ran on.
_PROBE = """
import importlib, json, sys
dotted = sys.argv[1]
before = set(sys.modules)
module, _, attribute = dotted.rpartition(".")
try:
    handler = getattr(importlib.import_module(module), attribute)
    error = None if callable(handler) else "not callable"
except BaseException as exc:
    error = f"{type(exc).__name__}: {exc}"
loaded = {name: getattr(sys.modules[name], "__file__", None) for name in set(sys.modules) - before}
versions = {}
for name in ("boto3", "botocore"):
    try:
        versions[name] = importlib.import_module(name).__version__
    except ImportError:
        versions[name] = None
python = "%d.%d" % sys.version_info[:2]
print(json.dumps({"error": error, "loaded": loaded, "python": python, **versions}))
"""


def import_alone(python: Path, package: Path, handler: str) -> dict[str, Any]:
    """Import ``handler`` from ``package`` in a new ``python`` process with a function's init environment.

    Parameters
    ----------
    python
        The interpreter (the Lambda layer's virtualenv).
    package
        The Lambda package (``/var/task`` on AWS): the only entry of ``PYTHONPATH``.
    handler
        ``module.attribute``.

    Returns
    -------
    dict
        ``error`` (None when the handler imported and is callable), ``loaded`` (module -> file), ``python``
        (``major.minor``), ``boto3`` and ``botocore`` (their versions in the child).
    """
    # No PYTHONPATH but the package, no user site, nothing of this process's environment (handlers read no
    # setting on import); tracing on, as deployed.
    with tempfile.TemporaryDirectory(prefix="lambda-tmp-") as tmp:
        done = subprocess.run(
            [str(python), "-c", _PROBE, handler],
            cwd=package,
            env=lambda_env.init_environment(package, Path(tmp), os.environ.get("PATH", "")),
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def import_each_alone(python: Path, package: Path, handlers: list[str]) -> dict[str, dict[str, Any]]:
    """:func:`import_alone` for every handler, each in its own process, two at a time."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(lambda handler: import_alone(python, package, handler), handlers)
        return dict(zip(handlers, results, strict=True))

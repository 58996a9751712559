"""Code assets built by copying files (local bundling): no Docker, no network, reproducible hashes.

Two packages are built from the repository:

- the **Lambda package**: ``functions/`` and the server-side layers of ``spotrun/`` (:data:`LAMBDA_PACKAGES`:
  the model, the use cases, the AWS adapters and the few top files they import; never the CLI, the agent or
  the emulator) plus PyYAML's pure-Python sources; Powertools, pydantic and boto3 come from the Powertools
  layer and the runtime.
  ``tests/infra/test_bundle_imports.py`` imports every handler from this package in a virtualenv holding only
  the layer's packages, so a dependency the deployed functions lack fails ``make test``.
- the **agent package**: the installable project (``pyproject.toml``, ``README.md``, ``spotrun/``), which the
  instance's user data installs into a virtualenv.

The asset hash is computed here from the copied files' paths and contents, never from modification times, so
the same sources give the same asset on every machine and an unchanged deploy uploads nothing.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsii
import yaml
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling

from spotrun.shape import REPO_ROOT

# Never shipped: bytecode and compiled extensions.
_SKIPPED_DIRS = {"__pycache__"}
_SKIPPED_SUFFIXES = {".pyc", ".pyo", ".so"}
# The parts of spotrun/ the Lambda functions run: the layers below functions/ (pyproject's import contracts keep
# rich, typer and moto out of them) and the top files they import. Everything else (the CLI, the agent, the
# emulator, the training helpers) stays on people's machines and instances.
LAMBDA_PACKAGES = (
    "spotrun/__init__.py",
    "spotrun/shape.py",
    "spotrun/model",
    "spotrun/control",
    "spotrun/aws",
)


@dataclass(frozen=True)
class Tree:
    """Files of one source directory, copied under ``target`` in the package."""

    source: Path
    target: str

    def files(self) -> Iterator[tuple[Path, str]]:
        """Yield ``(absolute path, path in the package)`` for every file shipped, in a stable order."""
        if self.source.is_file():
            yield self.source, self.target
            return
        for path in sorted(self.source.rglob("*")):
            relative = path.relative_to(self.source)
            if path.is_dir() or _skipped(relative):
                continue
            yield path, f"{self.target}/{relative.as_posix()}"


def _skipped(relative: Path) -> bool:
    return any(part in _SKIPPED_DIRS for part in relative.parts[:-1]) or relative.suffix in _SKIPPED_SUFFIXES


def lambda_trees() -> list[Tree]:
    """What the Lambda package holds: the handlers, the core, and PyYAML (the layer lacks it)."""
    yaml_dir = Path(yaml.__file__).resolve().parent
    return [
        Tree(REPO_ROOT / "functions", "functions"),
        *(Tree(REPO_ROOT / part, part) for part in LAMBDA_PACKAGES),
        Tree(yaml_dir, "yaml"),
    ]


def agent_trees() -> list[Tree]:
    """What the agent package holds: an installable copy of the project."""
    return [
        Tree(REPO_ROOT / "pyproject.toml", "pyproject.toml"),
        Tree(REPO_ROOT / "README.md", "README.md"),
        Tree(REPO_ROOT / "spotrun", "spotrun"),
    ]


def content_hash(trees: Iterable[Tree]) -> str:
    """SHA-256 over every shipped file's package path and bytes.

    Parameters
    ----------
    trees
        The package's sources.

    Returns
    -------
    str
        A hex digest that changes exactly when the package's content changes.
    """
    digest = hashlib.sha256()
    for tree in trees:
        for path, target in tree.files():
            digest.update(target.encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@jsii.implements(ILocalBundling)
class CopyBundler:
    """An :class:`aws_cdk.ILocalBundling` that copies :class:`Tree` s into the asset's output directory."""

    def __init__(self, trees: list[Tree]):
        self._trees = trees

    def try_bundle(self, output_dir: str, *_options: Any, **_keywords: Any) -> bool:
        """Copy every shipped file; True tells CDK that no Docker bundling is needed.

        jsii hands over the bundling options (positionally or by keyword, depending on its version); a copy
        needs none of them.
        """
        out = Path(output_dir)
        for tree in self._trees:
            for path, target in tree.files():
                destination = out / target
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, destination)
        return True


def bundled(trees: list[Tree], image: DockerImage) -> dict[str, Any]:
    """Keyword arguments of an asset (``Code.from_asset``, ``Asset``) that bundles ``trees`` locally.

    Parameters
    ----------
    trees
        The package's sources.
    image
        The image Docker bundling would use; required by the API, never run because local bundling succeeds.

    Returns
    -------
    dict
        ``path``, ``bundling``, ``asset_hash_type`` and ``asset_hash``.
    """
    return {
        # A small directory: with a custom hash CDK does not fingerprint it, and local bundling ignores it.
        "path": str(REPO_ROOT / "functions"),
        "bundling": BundlingOptions(image=image, local=CopyBundler(trees)),
        "asset_hash_type": AssetHashType.CUSTOM,
        "asset_hash": content_hash(trees),
    }

"""`make bench`: run the benchmark sections, write ``bench/results/<name>.json`` and ``bench/results/README.md``.

Each section is a module ``bench/<name>.py`` exposing ``run(runs) -> {"name", "title", "markdown", "results"}``;
a section whose module is absent from this tree is skipped with a line saying so. ``README.md`` holds every
section that has a results file, each with the commit it was measured at, so ``--only`` refreshes some
sections and keeps the others' last results.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.common import RESULTS, git_state, results_readme, write_result

# In the order the README shows them.
SECTIONS = ("recovery", "recovery_group", "resident", "cold_start", "scale", "transfers", "simulate")
DEFAULT_RUNS = 3


def section_module(name: str) -> ModuleType | None:
    """``bench.<name>``, or None when this tree has no such module (an error inside it is raised)."""
    dotted = f"bench.{name}"
    try:
        return importlib.import_module(dotted)
    except ModuleNotFoundError as exc:
        if exc.name == dotted:
            return None
        raise


def chosen(only: str | None) -> list[str]:
    """The sections ``--only`` names (comma-separated), in :data:`SECTIONS` order; all without it.

    Raises
    ------
    SystemExit
        When a name is not a section.
    """
    if not only:
        return list(SECTIONS)
    names = [name.strip() for name in only.split(",") if name.strip()]
    unknown = [name for name in names if name not in SECTIONS]
    if unknown:
        raise SystemExit(f"unknown section(s) {', '.join(unknown)}; the sections: {', '.join(SECTIONS)}")
    return [name for name in SECTIONS if name in names]


def stored_sections(results: Path | None = None) -> list[dict[str, Any]]:
    """Every section's last results document under ``results`` (:data:`RESULTS`), in :data:`SECTIONS` order."""
    results = results or RESULTS
    documents = []
    for name in SECTIONS:
        path = results / f"{name}.json"
        if path.is_file():
            documents.append(json.loads(path.read_text()))
    return documents


def main(argv: Sequence[str] | None = None) -> int:
    """Run the chosen sections; return 1 when one of them failed (the others still run and are written)."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", help=f"comma-separated sections among {', '.join(SECTIONS)}")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="measurements per configuration")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    commit, dirty = git_state()
    failed = []
    for name in chosen(args.only):
        module = section_module(name)
        if module is None:
            print(f"== {name}: skipped (no bench/{name}.py in this tree)", flush=True)
            continue
        print(f"== {name}: {args.runs} run(s) per configuration", flush=True)
        began = time.monotonic()
        try:
            result = module.run(args.runs)
        except Exception as exc:  # one failed section must not lose the others' results
            print(f"== {name}: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            failed.append(name)
            continue
        result["seconds"] = round(time.monotonic() - began, 1)
        path = write_result(result, commit, dirty, RESULTS)
        print(result["markdown"], flush=True)
        print(f"== {name}: {result['seconds']} s, written to {path}", flush=True)
    (RESULTS / "README.md").write_text(results_readme(stored_sections(RESULTS)))
    if failed:
        print(f"failed sections: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

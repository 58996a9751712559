"""Cold start of every Lambda handler: its import in a fresh interpreter, against a bare ``import boto3``.

What is measured is what ships: the Lambda package is built once per section by the bundler CDK uses
(``infra.constructs.bundling``: ``functions/``, the server-side layers of ``spotrun/``, PyYAML), and every
measurement is a fresh interpreter started in that package with it alone on ``PYTHONPATH`` (as Lambda imports
from ``/var/task``), no user site and none of this process's environment. The interpreter is this one (the
project's virtualenv: the same Python, Powertools, pydantic and boto3 pins as the Powertools layer and the
runtime); ``tests/infra/test_bundle_imports.py`` separately proves that the handlers import with nothing but
the layer, and the probe below checks that each handler module was loaded from the package.

The figure is the time measured inside the child around ``importlib.import_module`` of the handler's module
(and the attribute lookup), with ``time.perf_counter``: interpreter start-up, the same for both sides, is left
out, and nothing but ``importlib`` and ``time`` (already loaded at start-up) is imported before it; ``json`` is
imported after. The baseline is the same probe importing ``boto3``. Each handler is measured in pairs with
the baseline, A B A B ..., and its ratio is the median of the per-pair ratios.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import REPO, TIMES, MeasurementError, fmt, last_json_line, stats, stderr_tail, verdict

TARGET = 2.0  # every handler's import at most 2x a bare `import boto3` (issue 12)
BASELINE = "boto3"

# Run as `python -c PROBE <dotted>`: `<dotted>` is a module (the baseline) or "module.attribute" (a handler).
PROBE = """
import sys, time, importlib
dotted = sys.argv[1]
began = time.perf_counter()
if dotted == "boto3":
    module = importlib.import_module(dotted)
else:
    name, _, attribute = dotted.rpartition(".")
    module = importlib.import_module(name)
    getattr(module, attribute)
seconds = time.perf_counter() - began
import json
print(json.dumps({"seconds": seconds, "file": getattr(module, "__file__", None), "modules": len(sys.modules)}))
"""


def handlers() -> list[str]:
    """Every deployed function's handler (``module.attribute``), once each, in the shape's order."""
    from spotrun.shape import SHAPE

    return list(dict.fromkeys(spec.handler for spec in SHAPE.functions))


def build_package(out: Path) -> Path:
    """Build the Lambda package into ``out`` as CDK does (local bundling: a copy)."""
    # infra.app sets jsii's environment (its package cache in the project, Node's end-of-life banner silenced)
    # before the first CDK module starts jsii, as `make synth` has it.
    import infra.app  # noqa: F401
    from infra.constructs.bundling import CopyBundler, lambda_trees

    if not CopyBundler(lambda_trees()).try_bundle(str(out)):
        raise RuntimeError("the Lambda package could not be built")
    return out


def measure_import(package: Path, dotted: str) -> dict[str, Any]:
    """Import ``dotted`` in a fresh interpreter from ``package``; the seconds the import took, from inside.

    Raises
    ------
    MeasurementError
        When the child fails, or a handler module was not loaded from the package.
    """
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(package), "PYTHONNOUSERSITE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, dotted],
        cwd=package,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise MeasurementError(f"importing {dotted} exited {done.returncode}:\n{stderr_tail(done.stderr)}")
    result = last_json_line(done.stdout)
    if dotted != BASELINE and not str(result.get("file", "")).startswith(str(package)):
        raise MeasurementError(f"{dotted} was imported from {result.get('file')}, not from the package")
    return result


def run(runs: int) -> dict[str, Any]:
    """Measure every handler ``runs`` times, each paired with a fresh ``import boto3``."""
    names = handlers()
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="spotrun-bench-lambda-") as scratch:
        package = build_package(Path(scratch))
        for index in range(runs):
            print(f"   cold_start round {index + 1}/{runs}", flush=True)
            for name in names:
                base = measure_import(package, BASELINE)["seconds"]
                seconds = measure_import(package, name)["seconds"]
                samples[name].append({"seconds": seconds, "baseline": base, "ratio": seconds / base})
    results = summarize(samples)
    return {
        "name": "cold_start",
        "title": "Cold start: each Lambda handler's import against a bare `import boto3`",
        "markdown": markdown(results, runs),
        "results": results,
    }


def summarize(samples: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Per handler: the statistics of its import, of its paired baselines and of the per-pair ratios."""
    per = {}
    for name, pairs in samples.items():
        ratio = stats(p["ratio"] for p in pairs)
        per[name] = {
            "seconds": stats(p["seconds"] for p in pairs).as_dict(),
            "baseline": stats(p["baseline"] for p in pairs).as_dict(),
            "ratio": ratio.as_dict(),
            "met": ratio.median <= TARGET,
            "samples": pairs,
        }
    return {"target": TARGET, "handlers": per, "all_met": all(h["met"] for h in per.values())}


def markdown(results: dict[str, Any], runs: int) -> str:
    """One row per handler: its import, the paired `import boto3`, the ratio, the verdict."""
    from bench.common import Stats

    def cell(d: dict[str, Any], unit: str, digits: int, scale: float = 1.0) -> str:
        return fmt(Stats(d["median"] * scale, d["min"] * scale, d["max"] * scale, d["n"]), unit, digits)

    lines = [
        f"| handler | import | `import boto3` (paired) | ratio | ≤ {TARGET:g}\u00d7 |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for name, h in results["handlers"].items():
        lines.append(
            f"| `{name}` | {cell(h['seconds'], ' ms', 0, 1000)} | {cell(h['baseline'], ' ms', 0, 1000)} "
            f"| {cell(h['ratio'], TIMES, 2)} | {'yes' if h['met'] else '**no**'} |"
        )
    failing = [name for name, h in results["handlers"].items() if not h["met"]]
    lines += [
        "",
        f"- Every handler ≤ {TARGET:g}\u00d7 a bare `import boto3` (median of per-pair ratios): "
        f"{verdict(results['all_met'])}" + (f" (over: {', '.join(failing)})." if failing else "."),
        "",
        f"Config: the Lambda package built by infra's bundler, each import in a fresh interpreter "
        f"({Path(sys.executable).name} {sys.version.split()[0]}, only the package on PYTHONPATH), timed inside "
        f"the child around the import; {runs} pairs per handler, interleaved with the baseline. Medians "
        "[min\u2013max]. The machine (2 cores) was shared with other work.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    # Nothing to run alone: `python -m bench --only cold_start` measures (its children run PROBE, not this).
    raise SystemExit(f"run it through the bench: cd {REPO} && python -m bench --only cold_start")

"""Cold start of every Lambda handler: its import in a fresh interpreter, against a bare ``import boto3``.

What is measured is what ships, where it ships:

- the code: the Lambda package, built once per section by the bundler CDK uses
  (``infra.constructs.control_plane.bundling``: ``functions/``, the server-side layers of ``spotrun/``, PyYAML),
  alone on ``PYTHONPATH`` as ``/var/task`` is;
- the interpreter: the Lambda layer's virtualenv (:func:`infra.lambda_env.lambda_python`: the Powertools layer's
  packages and the runtime's boto3 at the project's pins, nothing else), not the project's dev virtualenv, whose
  moto, hypothesis and pydantic plugins (found through entry points) Lambda lacks;
- the environment: a function's at init (:func:`infra.lambda_env.init_environment`: Lambda's own variables,
  with ``LAMBDA_TASK_ROOT`` turning Powertools' Tracer and the X-Ray SDK on as active tracing does, and the
  ``POWERTOOLS_*`` variables infra sets), nothing of this process's.

Inside the child, around ``importlib.import_module`` of the handler's module (and the attribute lookup), two
figures are taken: the wall time (``time.perf_counter``) and the CPU time, user + system, of the child
(``resource.getrusage(RUSAGE_SELF)`` deltas). Interpreter start-up, the same for both sides, is left out, and
nothing but ``importlib``, ``time`` and ``resource`` (loaded before the clock starts) is imported before the
import measured; ``json`` is imported after. The baseline is the same probe importing ``boto3``. Each handler
is measured in pairs with the baseline, A B A B ..., and its ratio is the median of the per-pair ratios.

The verdict uses the **CPU** ratio: an import is CPU-bound (files are in the page cache after the warm-up), and
on a shared machine CPU time counts only what the child itself ran, where wall time also counts the time it
waited for a core that another process held. The wall ratio is shown beside it.

Beside the CPU time, each import's **instructions** are counted once, where valgrind is installed: the whole
child under ``valgrind --tool=callgrind`` for ``python -c "import <module>"``, less the same child for
``python -c pass``, over the same count for ``import boto3`` (``PYTHONHASHSEED=0``). An instruction count does not
depend on what else the machine runs (the same total twice, one run with the other core loaded), so it resolves
differences of a few percent that the CPU ratios' spread on a shared machine hides. It is shown, not judged on:
it leaves out cache misses, which CPU time counts.

One import of every module, uncounted, comes first: it writes the package's bytecode (``__pycache__``), so
every counted import reads compiled files, as the layer's and the runtime's packages are read.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import REPO, TIMES, MeasurementError, fmt, last_json_line, stats, stderr_tail, verdict
from infra.lambda_env import init_environment, lambda_python

TARGET = 2.0  # every handler's import at most 2x a bare `import boto3` (issue 12)
BASELINE = "boto3"

# Run as `python -c PROBE <dotted>`: `<dotted>` is a module (the baseline) or "module.attribute" (a handler).
PROBE = """
import sys, time, importlib, resource
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
dotted = sys.argv[1]
began, began_cpu = time.perf_counter(), cpu()
if dotted == "boto3":
    module = importlib.import_module(dotted)
else:
    name, _, attribute = dotted.rpartition(".")
    module = importlib.import_module(name)
    getattr(module, attribute)
seconds, cpu_seconds = time.perf_counter() - began, cpu() - began_cpu
import json
print(json.dumps({
    "seconds": seconds, "cpu": cpu_seconds, "file": getattr(module, "__file__", None), "modules": len(sys.modules)
}))
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
    from infra.constructs.control_plane.bundling import CopyBundler, lambda_trees

    out.mkdir(parents=True, exist_ok=True)
    if not CopyBundler(lambda_trees()).try_bundle(str(out)):
        raise RuntimeError("the Lambda package could not be built")
    return out


def measure_import(python: Path, package: Path, tmp: Path, dotted: str) -> dict[str, Any]:
    """Import ``dotted`` in a fresh ``python`` from ``package``; the import's wall and CPU seconds, from inside.

    Raises
    ------
    MeasurementError
        When the child fails, or a handler module was not loaded from the package.
    """
    done = subprocess.run(
        [str(python), "-c", PROBE, dotted],
        cwd=package,
        env=init_environment(package, tmp, os.environ.get("PATH", "")),
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


def instruction_counts(python: Path, package: Path, tmp: Path, names: list[str]) -> dict[str, Any] | None:
    """Instructions each handler's import executes, and ``import boto3``'s; None where valgrind is not installed.

    Raises
    ------
    MeasurementError
        When a child fails under valgrind.
    """
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    env = {**init_environment(package, tmp, os.environ.get("PATH", "")), "PYTHONHASHSEED": "0"}

    def count(code: str) -> int:
        done = subprocess.run(
            [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", str(python), "-c", code],
            cwd=package,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        found = re.search(r"Collected : (\d+)", done.stderr)
        if done.returncode != 0 or found is None:
            raise MeasurementError(
                f"callgrind of {code!r} exited {done.returncode}:\n{stderr_tail(done.stderr)}"
            )
        return int(found.group(1))

    codes = {"": "pass", BASELINE: f"import {BASELINE}"}
    codes |= {name: f"import {name.rpartition('.')[0]}" for name in names}
    with ThreadPoolExecutor(max_workers=2) as pool:  # a count does not depend on what runs beside it
        counted = dict(zip(codes, pool.map(count, codes.values()), strict=True))
    start = counted.pop("")
    baseline = counted.pop(BASELINE) - start
    return {
        "baseline": baseline,
        "handlers": {
            name: {"instructions": n - start, "ratio": (n - start) / baseline} for name, n in counted.items()
        },
    }


def pairs_for(runs: int) -> int:
    """Pairs per handler for ``--runs``: two more than the runs (5 at the default 3), the ratios being noisy."""
    return runs + 2


def run(runs: int) -> dict[str, Any]:
    """Measure every handler :func:`pairs_for` ``(runs)`` times, each paired with a fresh ``import boto3``."""
    names = handlers()
    pairs = pairs_for(runs)
    python = lambda_python()
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="spotrun-bench-lambda-") as scratch:
        package, tmp = build_package(Path(scratch) / "task"), Path(scratch) / "tmp"
        tmp.mkdir()
        for name in [BASELINE, *names]:  # uncounted: writes the bytecode
            measure_import(python, package, tmp, name)
        for index in range(pairs):
            print(f"   cold_start pair {index + 1}/{pairs}", flush=True)
            for name in names:
                base = measure_import(python, package, tmp, BASELINE)
                handler = measure_import(python, package, tmp, name)
                samples[name].append(
                    {
                        "seconds": handler["seconds"],
                        "baseline": base["seconds"],
                        "ratio": handler["seconds"] / base["seconds"],
                        "cpu": handler["cpu"],
                        "baseline_cpu": base["cpu"],
                        "cpu_ratio": handler["cpu"] / base["cpu"],
                    }
                )
        instructions = instruction_counts(python, package, tmp, names)
    results = summarize(samples)
    results["interpreter"] = str(python)
    results["python_version"] = interpreter_version(python)
    results["instructions"] = instructions
    return {
        "name": "cold_start",
        "title": "Cold start: each Lambda handler's import against a bare `import boto3`",
        "markdown": markdown(results, pairs),
        "results": results,
    }


def interpreter_version(python: Path) -> str:
    """The version ``python`` runs (the layer's virtualenv's, not this process's: the table names it)."""
    code = "import platform; print(platform.python_version())"
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def summarize(samples: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Per handler: the statistics of its import, of its paired baselines and of the per-pair ratios.

    The verdict (``met``) is the median CPU ratio's (see the module's docstring).
    """
    per = {}
    for name, pairs in samples.items():
        figures = {key: stats(p[key] for p in pairs) for key in pairs[0]}
        per[name] = {
            **{key: value.as_dict() for key, value in figures.items()},
            "met": figures["cpu_ratio"].median <= TARGET,
            "samples": pairs,
        }
    return {
        "target": TARGET,
        "verdict_on": "cpu_ratio",
        "handlers": per,
        "all_met": all(h["met"] for h in per.values()),
    }


def markdown(results: dict[str, Any], pairs: int) -> str:
    """One row per handler: CPU time of its import, of the paired `import boto3`, their ratio; the wall ratio."""
    from bench.common import Stats

    def cell(d: dict[str, Any], unit: str, digits: int, scale: float = 1.0) -> str:
        return fmt(Stats(d["median"] * scale, d["min"] * scale, d["max"] * scale, d["n"]), unit, digits)

    counted = results.get("instructions") or {"handlers": {}}

    def instructions(name: str) -> str:
        found = counted["handlers"].get(name)
        return f"{found['instructions'] / 1e6:,.0f} M, {found['ratio']:.3f}{TIMES}" if found else "n/a"

    lines = [
        f"| handler | import, CPU | `import boto3`, CPU (paired) | CPU ratio | wall ratio | instructions, ratio "
        f"| ≤ {TARGET:g}\u00d7 (CPU) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, h in results["handlers"].items():
        lines.append(
            f"| `{name}` | {cell(h['cpu'], ' ms', 0, 1000)} | {cell(h['baseline_cpu'], ' ms', 0, 1000)} "
            f"| {cell(h['cpu_ratio'], TIMES, 2)} | {cell(h['ratio'], TIMES, 2)} | {instructions(name)} "
            f"| {'yes' if h['met'] else '**no**'} |"
        )
    failing = [name for name, h in results["handlers"].items() if not h["met"]]
    instructions_note = (
        'Instructions: the whole child under callgrind for `python -c "import <module>"` less `python -c pass`, '
        f"over the same for `import boto3` ({counted['baseline'] / 1e6:,.0f} M), once each (deterministic), "
        "shown and not judged on."
        if counted["handlers"]
        else "Instructions: n/a (valgrind is not installed)."
    )
    lines += [
        "",
        f"- Every handler ≤ {TARGET:g}\u00d7 a bare `import boto3` (median of per-pair CPU ratios): "
        f"{verdict(results['all_met'])}" + (f" (over: {', '.join(failing)})." if failing else "."),
        "",
        f"Config: the Lambda package built by infra's bundler, each import in a fresh interpreter of the Lambda "
        f"layer's virtualenv (Powertools layer packages + the runtime's boto3 only; Python "
        f"{results['python_version']}), only the package on PYTHONPATH, a function's init environment (tracing on); "
        f"timed inside the child around the import, CPU = user + system time of the child "
        f"(getrusage), wall = perf_counter; {pairs} pairs per handler, interleaved with the baseline, after "
        "one uncounted import of each (bytecode written). The verdict uses the CPU ratio: CPU time counts only "
        "what the child ran, wall time also its waits for a core another process held. Medians "
        "[min\u2013max]. The machine (2 cores) was shared with other work. " + instructions_note,
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    # Nothing to run alone: `python -m bench --only cold_start` measures (its children run PROBE, not this).
    raise SystemExit(f"run it through the bench: cd {REPO} && python -m bench --only cold_start")

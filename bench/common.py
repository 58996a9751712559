"""What every benchmark shares: the fresh-process runner, interleaving, statistics, the commit, the results.

A benchmark module ``bench/<name>.py`` exposes ``run(runs) -> dict`` (see :mod:`bench.__main__`) and takes each
measurement in a fresh interpreter, through :func:`run_once`: state left by one measurement (a logger's closed
stream, moto's backends, imported modules, warmed caches) can then never reach the next.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
# How much of a failed child's stderr an error quotes: enough for a traceback, not a whole log.
STDERR_TAIL_LINES = 40
TIMES = "\u00d7"  # a ratio's unit in the tables (escaped: ruff flags the sign as a confusable)

T = TypeVar("T")
C = TypeVar("C")


class MeasurementError(RuntimeError):
    """A measurement's child process failed, or printed no JSON line."""


def stderr_tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    """The last ``lines`` lines of ``text``, for an error message."""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def last_json_line(stdout: str) -> dict[str, Any]:
    """The last line of ``stdout`` that is a JSON object: what a ``--once`` child prints as its result.

    Raises
    ------
    ValueError
        When no line is a JSON object.
    """
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line.strip())
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise ValueError("no JSON object line in the output")


def config_flags(config: Any) -> list[str]:
    """A measurement's config (a dataclass) as ``--field-name=value`` flags, as :func:`child_main` reads them."""
    return [
        f"--{field.name.replace('_', '-')}={getattr(config, field.name)}"
        for field in dataclasses.fields(config)
    ]


def child_main(
    argv: Sequence[str],
    config_type: type[C],
    modes: Sequence[str],
    measure: Callable[[C, Any, Path], dict[str, Any]],
) -> None:
    """The ``--once --mode MODE <config flags>`` child: one measurement in a scratch directory, its JSON line printed.

    Parameters
    ----------
    argv
        The child's arguments: ``--once``, ``--mode`` (one of ``modes``) and :func:`config_flags`' flags, each
        field's default when left out.
    config_type
        The measurement's config, a dataclass whose defaults all have the type of their field.
    modes
        The configurations measured.
    measure
        ``measure(config, mode, workdir)``: the measurement (``measure_once`` of the bench's module).
    """
    module = measure.__module__
    parser = argparse.ArgumentParser(prog=f"python -m {module}")
    parser.add_argument("--once", action="store_true", required=True)
    parser.add_argument("--mode", choices=modes, required=True)
    defaults = config_type()
    fields = dataclasses.fields(defaults)  # type: ignore[arg-type]
    for field in fields:
        default = getattr(defaults, field.name)
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=type(default), default=default)
    args = parser.parse_args(argv)
    config = config_type(**{field.name: getattr(args, field.name) for field in fields})
    prefix = f"spotrun-bench-{module.rsplit('.', 1)[-1].replace('_', '-')}-"
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        result = measure(config, args.mode, Path(scratch))
    print(json.dumps(result), flush=True)


def run_once(module: str, args: Sequence[str] = (), *, timeout: float = 600.0) -> dict[str, Any]:
    """Run ``python -m <module> --once <args>`` in a fresh interpreter and return the JSON line it prints.

    Parameters
    ----------
    module
        The benchmark module, e.g. ``bench.recovery``.
    args
        Its arguments after ``--once``.
    timeout
        Seconds before the child is killed.

    Raises
    ------
    MeasurementError
        When the child exits non-zero, times out, or prints no JSON object line; the message ends with the
        tail of its stderr.
    """
    argv = [sys.executable, "-m", module, "--once", *args]
    try:
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise MeasurementError(
            f"{' '.join(argv[2:])} timed out after {timeout:g} s:\n{stderr_tail(err)}"
        ) from exc
    if done.returncode != 0:
        raise MeasurementError(f"{' '.join(argv[2:])} exited {done.returncode}:\n{stderr_tail(done.stderr)}")
    try:
        return last_json_line(done.stdout)
    except ValueError as exc:
        raise MeasurementError(
            f"{' '.join(argv[2:])} printed no JSON result:\n{stderr_tail(done.stderr)}"
        ) from exc


def interleaved(configurations: Sequence[T], runs: int) -> Iterator[tuple[int, T]]:
    """``(run index, configuration)`` in the order A B A B ...: every configuration once per round.

    Interleaving spreads a drift of the machine's speed (other work starting or ending) over every
    configuration alike, instead of charging it to whichever ran last.
    """
    for index in range(runs):
        for configuration in configurations:
            yield index, configuration


@dataclass(frozen=True)
class Stats:
    """The median of some measurements and their range."""

    median: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, float | int]:
        return {"median": self.median, "min": self.low, "max": self.high, "n": self.n}


def stats(values: Iterable[float]) -> Stats:
    """Median, minimum and maximum of ``values``.

    Raises
    ------
    ValueError
        When there are none.
    """
    data = list(values)
    if not data:
        raise ValueError("no measurements")
    return Stats(statistics.median(data), min(data), max(data), len(data))


def fmt(value: Stats, unit: str = " s", digits: int = 1) -> str:
    """``7.9 s [7.1-8.8]`` (an en dash): the median, then the range of the runs."""
    return f"{value.median:.{digits}f}{unit} [{value.low:.{digits}f}\u2013{value.high:.{digits}f}]"


def verdict(ok: bool) -> str:
    """How a table says whether a target is met."""
    return "**met**" if ok else "**NOT met**"


def git_state(repo: Path = REPO) -> tuple[str, bool]:
    """The commit checked out in ``repo`` and whether its tree has changes (tracked or untracked files).

    Results written under ``bench/results/`` do not count as changes: they are what a run writes.
    """
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=repo
        ).stdout.strip()
        changes = subprocess.run(
            ["git", "status", "--porcelain", "--", ".", ":(exclude)bench/results"],
            capture_output=True,
            text=True,
            check=True,
            cwd=repo,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown", True
    return commit, bool(changes)


def write_result(result: dict[str, Any], commit: str, dirty: bool, results: Path | None = None) -> Path:
    """Write one section's result to ``<results>/<name>.json`` (:data:`RESULTS` by default), with its commit."""
    results = results or RESULTS
    results.mkdir(parents=True, exist_ok=True)
    path = results / f"{result['name']}.json"
    document = {"commit": commit, "dirty": dirty, **result}
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    return path


def results_readme(sections: Sequence[dict[str, Any]]) -> str:
    """The markdown of ``bench/results/README.md``: every section, each with the commit it was measured at.

    Each item is a results document as :func:`write_result` wrote it (``name``, ``title``, ``markdown``,
    ``commit``, ``dirty``).
    """
    lines = [
        "# Bench results",
        "",
        "Written by `make bench` (`python -m bench`); see docs/development/bench.md. Each section names the commit",
        "it was measured at (`+dirty`: with uncommitted changes).",
        "",
    ]
    for section in sections:
        commit = section.get("commit", "unknown") + ("+dirty" if section.get("dirty") else "")
        body = section["markdown"].strip()
        if body.startswith("## "):  # a document written when the sections titled their own markdown
            body = body.partition("\n")[2].strip()
        lines += [f"## {section['title']}", "", f"Commit `{commit}`.", "", body, ""]
    return "\n".join(lines)

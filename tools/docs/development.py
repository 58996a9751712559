"""The development pages' generated parts: the Makefile's targets, each with the line that documents it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A target is documented by a comment line `## name: what it does` right above its rule.
_TARGET = re.compile(r"^## ([a-z-]+): (.*)$", re.MULTILINE)


def make_targets() -> str:
    """Every documented target of the Makefile, in the file's order, as a table."""
    lines = ["| command | what it does |", "| --- | --- |"]
    for name, text in _TARGET.findall((ROOT / "Makefile").read_text()):
        lines.append(f"| `make {name}` | {text.replace('|', chr(92) + '|')} |")
    return "\n".join(lines) + "\n"


def bench_result(section: str) -> str:
    """The committed result of one ``make bench`` section (``bench/results/<section>.json``) with its commit."""
    import json

    path = ROOT / "bench" / "results" / f"{section}.json"
    result = json.loads(path.read_text())
    dirty = " with uncommitted changes" if result.get("dirty") else ""
    # The section's own headings go one level down: the page's heading for the section sits above them.
    markdown = re.sub(r"^(#+) ", r"#\1 ", result["markdown"].strip(), flags=re.MULTILINE)
    return (
        f"Measured at commit `{result['commit'][:10]}`{dirty} by "
        f"`make bench BENCH_ARGS='--only {section}'`, as committed in `bench/results/{section}.json`:\n\n"
        f"{markdown}\n"
    )

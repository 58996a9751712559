"""MkDocs hook (``hooks:`` in mkdocs.yml): fills the generated parts of the pages at build time.

A page asks for a part with an HTML comment on a line of its own, ``<!-- generated: NAME -->``; the part is
Markdown made from the code (``GENERATORS`` below), so the reference and architecture pages are never committed
stale. An unknown name, or a generator that fails, fails the build.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# MkDocs puts this folder on sys.path only while it loads the hook: the generators are imported now, and import
# each other by module name.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import architecture
import development
import reference
from mkdocs.exceptions import PluginError

GENERATORS: dict[str, Callable[[], str]] = {
    "manifest-fields": reference.manifest_fields,
    "manifest-json": reference.manifest_json,
    "job-record-fields": reference.job_record_fields,
    "cli-commands": reference.cli_commands,
    "event-rules": reference.event_rules,
    "bus-events": reference.bus_events,
    "aws-events": reference.aws_events,
    "layers": architecture.layers,
    "contracts": architecture.contracts,
    "package-tree": architecture.package_tree,
    "workflow-comment": architecture.workflow_comment,
    "workflow-table": architecture.workflow_table,
    "workflow-diagram": architecture.workflow_diagram,
    "make-targets": development.make_targets,
}
# Generators that take one argument: ``<!-- generated: NAME ARGUMENT -->``.
GENERATORS_OF_ONE: dict[str, Callable[[str], str]] = {
    "bench-result": development.bench_result,
    "modules": architecture.module_table,
}

MARKER = re.compile(r"^<!-- generated: ([a-z-]+)(?: ([a-z_/]+))? -->$", re.MULTILINE)


def render(markdown: str, where: str) -> str:
    """Replace every marker of ``markdown`` with its generated Markdown.

    Parameters
    ----------
    markdown
        A page's source.
    where
        The page's path, for the error message.

    Returns
    -------
    str
        The page with its generated parts.

    Raises
    ------
    PluginError
        A marker names no generator.
    """

    def replace(match: re.Match[str]) -> str:
        name, argument = match.groups()
        if argument is None and name in GENERATORS:
            return GENERATORS[name]()
        if argument is not None and name in GENERATORS_OF_ONE:
            return GENERATORS_OF_ONE[name](argument)
        known = sorted([*GENERATORS, *(f"{one} ARGUMENT" for one in GENERATORS_OF_ONE)])
        raise PluginError(f"{where}: no generator {match.group(0)!r} (tools/docs/hooks.py: {known})")

    return MARKER.sub(replace, markdown)


# The page whose YAML examples must be manifests spotrun accepts.
CHECKED_MANIFESTS = "reference/manifest.md"
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def check_manifests(markdown: str, where: str) -> None:
    """Read every YAML block of ``markdown`` with spotrun's manifest reader; fail the build on a refusal."""
    from spotrun.model.manifest.parse import ManifestError, parse_manifest_text

    for block in YAML_BLOCK.findall(markdown):
        try:
            parse_manifest_text(block)
        except ManifestError as error:
            raise PluginError(f"{where}: an example manifest is refused: {error}") from error


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    """MkDocs event: a page's Markdown, before it is converted."""
    if page.file.src_uri == CHECKED_MANIFESTS:
        check_manifests(markdown, page.file.src_uri)
    return render(markdown, page.file.src_uri)

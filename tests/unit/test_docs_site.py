"""The documentation site's checks: `make lint` builds it strictly, and a broken link or generator fails the build."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from spotrun.shape import REPO_ROOT, STATE_MACHINE_FILE

MKDOCS = Path(sys.executable).parent / "mkdocs"


def project_config() -> dict:
    """The project's mkdocs.yml, read with its Python tags (the Mermaid fence's formatter) left unresolved."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: suffix)
    return yaml.load((REPO_ROOT / "mkdocs.yml").read_text(), Loader=Loader)  # noqa: S506 (a SafeLoader)


def lint_plan() -> list[str]:
    """The commands ``make -n lint`` prints (a dry run, the install taken as done)."""
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-o", ".venv/.installed-dev", "lint"],
        cwd=REPO_ROOT,
        env={
            key: value for key, value in os.environ.items() if key not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL"}
        },
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


@functools.cache
def lint_mkdocs_arguments() -> tuple[str, ...]:
    """The arguments `make lint` gives mkdocs."""
    [line] = [line for line in lint_plan() if "mkdocs build" in line]
    return tuple(line.split("mkdocs", 1)[1].split())


def build(site: Path, link: str) -> subprocess.CompletedProcess[str]:
    """Build a two-page site as `make lint` builds the project's, with its theme and link validation, one page
    linking ``link``."""
    docs = site / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    (docs / "index.md").write_text(f"# Home\n\nSee [the other page]({link}).\n")
    (docs / "other.md").write_text("# Other\n\n## A section\n")
    config = {
        "site_name": "probe",
        "theme": {"name": "material"},
        "validation": project_config()["validation"],
        "nav": ["index.md", "other.md"],
    }
    (site / "mkdocs.yml").write_text(json.dumps(config))  # JSON is YAML
    return subprocess.run(
        [str(MKDOCS), *lint_mkdocs_arguments()],
        cwd=site,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        check=False,
    )


# The hook's own modules, imported by their file names: gone from the test process after each test.
HOOK_MODULES = ("spotrun_docs_hooks", "architecture", "development", "reference", "schema_tables")


@pytest.fixture
def hooks(monkeypatch) -> Iterator[ModuleType]:
    """tools/docs/hooks.py, loaded by path as MkDocs loads it; sys.path and its modules restored after."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    path = REPO_ROOT / "tools" / "docs" / "hooks.py"
    spec = importlib.util.spec_from_file_location("spotrun_docs_hooks", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    for name in HOOK_MODULES:
        sys.modules.pop(name, None)


def test_make_lint_builds_the_site_strictly():
    # Given the Makefile
    # When make plans `make lint` (a dry run)
    arguments = lint_mkdocs_arguments()

    # Then it builds the site with warnings as errors, and nothing hides them (--quiet would: they would not count)
    assert arguments[:2] == ("build", "--strict")
    assert "--quiet" not in arguments
    assert "-q" not in arguments


def test_a_strict_build_fails_on_a_broken_link_and_passes_once_it_is_fixed(tmp_path):
    # Given a site with the project's link validation, one page linking to a page or an anchor that does not exist
    # When it is built as `make lint` builds the project's, then built again with the link fixed
    missing_page = build(tmp_path / "page", "missing.md")
    missing_anchor = build(tmp_path / "anchor", "other.md#no-such-section")
    fixed = build(tmp_path / "fixed", "other.md#a-section")

    # Then each broken link fails the build, naming it, and the fixed one builds
    assert missing_page.returncode != 0
    assert "missing.md" in missing_page.stderr
    assert missing_anchor.returncode != 0
    assert "no-such-section" in missing_anchor.stderr
    assert fixed.returncode == 0, fixed.stderr


def test_a_page_naming_an_unknown_generator_fails_the_build(hooks):
    # Given the site's hook

    # When a page names a generator that does not exist
    # Then the build stops, naming the page and the marker
    with pytest.raises(Exception, match=r"reference/x\.md: no generator .*no-such-part") as raised:
        hooks.render("# X\n\n<!-- generated: no-such-part -->\n", "reference/x.md")
    assert type(raised.value).__name__ == "PluginError"


def test_the_workflow_diagram_has_every_state_and_transition_of_the_asl(hooks):
    # Given the hook and the state machine's definition
    states = json.loads(STATE_MACHINE_FILE.read_text())["States"]

    # When the workflow page's diagram is generated
    diagram = hooks.render("<!-- generated: workflow-diagram -->", "architecture/workflow.md")

    # Then every state's every way out is an arrow, and the ends reach the final state
    def node(name: str) -> str:
        return "".join(character for character in name if character.isalnum())

    for name, state in states.items():
        targets = [state.get("Next"), state.get("Default")]
        targets += [choice["Next"] for choice in state.get("Choices", [])]
        targets += [catch["Next"] for catch in state.get("Catch", [])]
        for target in filter(None, targets):
            assert f"    {node(name)} --> {node(target)}" in diagram, (name, target)
        if state["Type"] in ("Succeed", "Fail"):
            assert f"    {node(name)} --> [*]" in diagram


def test_an_example_manifest_the_reader_refuses_fails_the_build(hooks):
    # Given the manifest reference with a YAML example that misspells a field
    page = "# Manifest\n\n```yaml\nname: probe\ntraining:\n  comand: [python, train.py]\n```\n"

    # When the hook reads the page
    # Then the build stops, saying which field the reader refused
    with pytest.raises(Exception, match=r"reference/manifest\.md: an example manifest is refused: .*comand"):
        hooks.check_manifests(page, "reference/manifest.md")


@pytest.mark.parametrize("root", ["spotrun", "functions", "infra"])
def test_every_package_of_the_architecture_tree_says_what_it_owns(hooks, root):
    # Given every package under a root the architecture page's tree shows
    packages = sorted(path.parent for path in (REPO_ROOT / root).rglob("__init__.py"))

    # When each package's docstring is read as the tree reads it
    silent = [
        package.relative_to(REPO_ROOT).as_posix()
        for package in packages
        if not hooks.architecture.first_paragraph(hooks.architecture.docstring(package / "__init__.py"))
    ]

    # Then none is missing: the tree names what each package owns
    assert packages
    assert silent == []

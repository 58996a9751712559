"""The architecture pages' generated parts: the layers and contracts, the package tree, the workflow.

Read at build time from what the tools themselves read: ``pyproject.toml``'s import-linter contracts, each
package's docstring (parsed, not imported), the ASL in ``statemachines/`` with the shape's substitutions, and the
handler modules' imports. tools/docs/hooks.py puts each where a page says ``<!-- generated: NAME -->``.
"""

from __future__ import annotations

import ast
import html
import json
import re
import tomllib
from pathlib import Path
from typing import Any

from schema_tables import cell

ROOT = Path(__file__).resolve().parents[2]
# The trees the annotated package tree covers, in the order of the layers from the top.
TREE_ROOTS = ("spotrun", "functions", "infra")


def _contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def layers() -> str:
    """The layers contract, top to bottom, as a list (``pyproject.toml``, ``[tool.importlinter]``)."""
    contract = next(item for item in _contracts() if item["type"] == "layers")
    lines = [f"**{contract['name']}** (top to bottom):", ""]
    for number, layer in enumerate(contract["layers"], start=1):
        folders = " and ".join(f"`{name.strip()}`" for name in layer.split("|"))
        lines.append(f"{number}. {folders}")
    return "\n".join(lines) + "\n"


def contracts() -> str:
    """Every other import-linter contract: the layers inside a floor, then what each other contract forbids."""
    inner = [item for item in _contracts() if item["type"] == "layers"][1:]
    lines = ["| inside a floor | top to bottom |", "| --- | --- |"]
    for item in inner:
        order = " → ".join(
            " and ".join(f"`{name.strip()}`" for name in layer.split("|")) for layer in item["layers"]
        )
        lines.append(f"| {cell(item['name'])} | {order} |")
    lines += ["", "| contract | kind | from | may not import |", "| --- | --- | --- | --- |"]
    for item in _contracts():
        if item["type"] == "layers":
            continue
        sources = item.get("source_modules") or item.get("ancestors") or []
        forbidden = ", ".join(f"`{name}`" for name in item.get("forbidden_modules", []))
        lines.append(
            f"| {cell(item['name'])} | {item['type']} | {', '.join(f'`{name}`' for name in sources)} "
            f"| {forbidden or 'a sibling module or folder that imports it back'} |"
        )
    return "\n".join(lines) + "\n"


# A module's docstring: its first statement, after comments and blank lines. Only that much is parsed, not the
# whole module: the tree covers every module of the three packages, and `make lint` builds the site.
_DOCSTRING = re.compile(r'\A(?:[ \t]*(?:#[^\n]*)?\n)*[ \t]*[rRuU]?("""|\'\'\')(.*?)\1', re.DOTALL)


def docstring(path: Path) -> str:
    """The docstring of a module file, unimported; empty when it has none."""
    match = _DOCSTRING.match(path.read_text())
    if match is None:
        return ""
    try:
        tree = ast.parse(match.group(0).lstrip())
    except SyntaxError:
        return ""
    return ast.get_docstring(tree) or ""


def first_paragraph(text: str) -> str:
    """The first paragraph of a docstring, on one line."""
    return " ".join(text.strip().split("\n\n", 1)[0].split())


def first_sentence(text: str) -> str:
    """The first sentence of a docstring (up to its first full stop followed by a space), on one line."""
    paragraph = first_paragraph(text)
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def _attribute(text: str) -> str:
    """Text for an HTML attribute: escaped, and without backticks, which Markdown would turn into tags there."""
    return html.escape(" ".join(text.replace("`", "").split()), quote=True)


def _package_entry(package: Path, depth: int) -> list[str]:
    relative = package.relative_to(ROOT).as_posix()
    summary = first_paragraph(docstring(package / "__init__.py"))
    modules = sorted(
        path for path in package.glob("*.py") if path.name != "__init__.py" and not path.name.startswith("_")
    )
    indent = "    " * depth
    lines = [f"{indent}- **`{relative}/`** {cell(summary) if summary else '*(no docstring)*'}"]
    if modules:
        rows = ", ".join(
            f'<span title="{_attribute(first_sentence(docstring(path)))}">`{path.stem}`</span>'
            for path in modules
        )
        lines.append(f"{indent}    <br>modules: {rows}")
    for child in sorted(path for path in package.iterdir() if (path / "__init__.py").is_file()):
        lines += _package_entry(child, depth + 1)
    return lines


def package_tree() -> str:
    """Every package of ``spotrun``, ``functions`` and ``infra``, nested, each with its docstring's first
    paragraph and its modules (hover a module for its first sentence)."""
    lines: list[str] = []
    for name in TREE_ROOTS:
        lines += _package_entry(ROOT / name, 0)
    return "\n".join(lines) + "\n"


def _asl() -> dict[str, Any]:
    from spotrun.shape import STATE_MACHINE_FILE

    definition: dict[str, Any] = json.loads(STATE_MACHINE_FILE.read_text())
    return definition


def _use_cases(handler: str) -> list[str]:
    """What a handler module imports from ``spotrun.control``: the use cases it calls."""
    module = handler.rsplit(".", 1)[0]
    path = ROOT / Path(*module.split(".")).with_suffix(".py")
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("spotrun.control"):
            names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def _transitions(state: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(target, label, caught error?) of every way out of a state."""
    out: list[tuple[str, str, bool]] = []
    for choice in state.get("Choices", []):
        condition = next(
            (f"{key} {value}" for key, value in choice.items() if key not in ("Next", "Variable")), ""
        )
        out.append((choice["Next"], f"{choice.get('Variable', '')} {condition}".strip(), False))
    if "Default" in state:
        out.append((state["Default"], "otherwise", False))
    if "Next" in state:
        out.append((state["Next"], "", False))
    for catch in state.get("Catch", []):
        out.append((catch["Next"], ", ".join(catch["ErrorEquals"]), True))
    return out


def workflow_table() -> str:
    """Each state of the job's workflow with the function it invokes, that function's handler and use case."""
    from spotrun.shape import SHAPE

    lines = [
        "| state | type | function | handler | use case | next | on error |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, state in _asl()["States"].items():
        function = handler = use_cases = ""
        parameters = state.get("Parameters", {})
        placeholder = str(parameters.get("FunctionName", "")).removeprefix("${").removesuffix("}")
        if placeholder in SHAPE.state_machine_functions:
            function = SHAPE.state_machine_functions[placeholder]
            handler = SHAPE.function(function).handler
            step = parameters.get("Payload", {}).get("step")
            cases = _use_cases(handler)
            if not cases:
                # A handler is its request model and one call of a use case: a table without it would mislead.
                raise ValueError(f"{handler} imports no use case from spotrun.control")
            use_cases = "<br>".join(f"`{case}`" for case in cases)
            function = f"`{function}`" + (f" (step `{step}`)" if step else "")
            handler = f"`{handler}`"
        wait = (
            "waits for the agent's task token"
            if state.get("Resource", "").endswith("waitForTaskToken")
            else ""
        )
        kind = state["Type"] + (f", {wait}" if wait else "")
        regular = [target for target, _, caught in _transitions(state) if not caught]
        errors = [f"{label} → `{target}`" for target, label, caught in _transitions(state) if caught]
        nexts = ", ".join(f"`{target}`" for target in dict.fromkeys(regular)) or "(end)"
        lines.append(
            f"| `{name}` | {kind} | {function} | {handler} | {use_cases} | {nexts} | {'<br>'.join(errors)} |"
        )
    return "\n".join(lines) + "\n"


def _mermaid_id(name: str) -> str:
    return "".join(character for character in name if character.isalnum())


def workflow_diagram() -> str:
    """The job's workflow as a Mermaid state diagram, every transition of the ASL (errors on the arrows)."""
    asl = _asl()
    lines = ["```mermaid", "stateDiagram-v2", f"    [*] --> {_mermaid_id(asl['StartAt'])}"]
    for name, state in asl["States"].items():
        node = _mermaid_id(name)
        if node != name:
            lines.append(f'    state "{name}" as {node}')
        if state["Type"] in ("Succeed", "Fail"):
            lines.append(f"    {node} --> [*]")
        for target, label, _ in _transitions(state):
            # Mermaid's labels end at a colon; the error names have none, the Choice's conditions only a few.
            text = label.replace(":", " ").replace("$.", "")
            if "," in text:
                text = f"{text.count(',') + 1} errors: {text}"
            lines.append(f"    {node} --> {_mermaid_id(target)}" + (f": {text}" if text else ""))
    lines.append("```")
    return "\n".join(lines) + "\n"


def workflow_comment() -> str:
    """The ASL's own comment and its start state."""
    asl = _asl()
    return f"{asl.get('Comment', '')} It starts at `{asl['StartAt']}`.\n"


def module_table(folder: str) -> str:
    """The modules of one package (a folder under the repository's root), each with its docstring's first
    sentence, and the modules of its sub-packages."""
    package = ROOT / folder
    if not (package / "__init__.py").is_file():
        raise ValueError(f"{folder} is not a package")
    lines = ["| module | what it is |", "| --- | --- |"]
    for path in sorted(package.rglob("*.py")):
        if path.name == "__init__.py" or "__pycache__" in path.parts:
            continue
        module = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        lines.append(f"| `{module}` | {cell(first_sentence(docstring(path)))} |")
    return "\n".join(lines) + "\n"

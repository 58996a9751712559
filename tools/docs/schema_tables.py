"""Markdown tables of a pydantic model's JSON Schema: one section per object, one row per field.

The schema says each field's type, default and constraints; the source says what the field means where the model
has no ``description``: the comment on the field's line, or the comment lines right above it. Both are read at
build time, so the reference pages cannot drift from the models.
"""

from __future__ import annotations

import ast
import enum
import html
import inspect
import json
import re
import textwrap
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel


def code(value: object) -> str:
    """An inline code span safe inside a Markdown table cell (HTML-escaped, no pipe)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return f"<code>{html.escape(text).replace('|', '&#124;')}</code>"


# A Sphinx cross-reference in a docstring (:mod:`x`, :class:`~x.Y`): shown as the code it names.
_SPHINX_ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|exc):`~?([^`]+)`")


def prose(text: str) -> str:
    """A docstring's text as Markdown: Sphinx cross-references become code spans."""
    return _SPHINX_ROLE.sub(r"`\1`", text)


def cell(text: str) -> str:
    """Prose for a table cell: one line, pipes escaped, angle brackets shown as text."""
    return " ".join(html.escape(prose(text), quote=False).replace("|", "\\|").split())


def anchor(prefix: str, name: str) -> str:
    """The HTML id of a definition's section (explicit, so links do not depend on the slugifier)."""
    return f"{prefix}-{name.lower()}"


def type_of(prop: Mapping[str, Any], link: typing.Callable[[str], str]) -> str:
    """A short, readable type of one schema node: ``string``, ``list of [Attempt](#...)``, ``"s3" or "api"``."""
    if "$ref" in prop:
        return link(prop["$ref"].rsplit("/", 1)[-1])
    if "const" in prop:
        return code(prop["const"])
    if "enum" in prop:
        return " or ".join(code(value) for value in prop["enum"])
    for key in ("anyOf", "oneOf", "allOf"):
        if key in prop:
            parts = [type_of(option, link) for option in prop[key]]
            return " or ".join(dict.fromkeys(parts))
    kind = prop.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array":
        return f"list of {type_of(prop.get('items', {}), link)}"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"map of string to {type_of(prop['additionalProperties'], link)}"
    if kind == "string" and "format" in prop:
        return f"string ({prop['format']})"
    return str(kind or "any")


_CONSTRAINTS = (
    ("pattern", "matches {}"),
    ("minimum", "≥ {}"),
    ("exclusiveMinimum", "> {}"),
    ("maximum", "≤ {}"),
    ("exclusiveMaximum", "< {}"),
    ("minLength", "at least {} characters"),
    ("maxLength", "at most {} characters"),
    ("minItems", "at least {} items"),
    ("maxItems", "at most {} items"),
    ("maxProperties", "at most {} entries"),
)


def constraints(prop: Mapping[str, Any]) -> list[str]:
    """The constraints of a field (and of the non-null branch of an optional one), as short phrases."""
    nodes = [prop, *[option for option in prop.get("anyOf", []) if option.get("type") != "null"]]
    found: list[str] = []
    for node in nodes:
        for key, phrase in _CONSTRAINTS:
            if key in node:
                found.append(phrase.format(code(node[key]) if key == "pattern" else node[key]))
    return found


def field_comments(cls: type) -> dict[str, str]:
    """What the source says of each field of ``cls``: its line's trailing comment, or the comments above it."""
    try:
        lines = textwrap.dedent(inspect.getsource(cls)).splitlines()
    except (OSError, TypeError):
        return {}
    tree = ast.parse("\n".join(lines))
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    comments: dict[str, str] = {}
    for node in body:
        if isinstance(node, ast.AnnAssign):
            target: ast.expr = node.target
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        else:
            continue
        if not isinstance(target, ast.Name):
            continue
        line = lines[node.lineno - 1]
        trailing = line.split("  # ", 1)[1] if "  # " in line else ""
        above: list[str] = []
        index = node.lineno - 2
        while index >= 0 and lines[index].strip().startswith("#"):
            above.insert(0, lines[index].strip().lstrip("#").strip())
            index -= 1
        text = " ".join(part for part in (" ".join(above), trailing) if part)
        if text:
            comments[target.id] = text
    return comments


def reachable_classes(roots: Iterable[type]) -> dict[str, type]:
    """Every model and enum class reachable from ``roots`` through field annotations, by class name."""
    found: dict[str, type] = {}

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel | enum.Enum):
            if annotation.__name__ in found:
                return
            found[annotation.__name__] = annotation
            if issubclass(annotation, BaseModel):
                for info in annotation.model_fields.values():
                    visit(info.annotation)
            return
        for argument in typing.get_args(annotation):
            visit(argument)

    for root in roots:
        visit(root)
    return found


def _held_summary(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    """The first sentence of the description of the object a field holds (directly, optionally, or as items)."""
    nodes = [prop, *prop.get("anyOf", []), prop.get("items", {})]
    for node in nodes:
        name = node.get("$ref", "").rsplit("/", 1)[-1]
        description = str(defs.get(name, {}).get("description", ""))
        if description:
            sentence = " ".join(description.split("\n\n", 1)[0].split())
            end = sentence.find(". ")
            return sentence if end < 0 else sentence[: end + 1]
    return ""


def definition_section(
    name: str,
    node: Mapping[str, Any],
    link: typing.Callable[[str], str],
    prefix: str,
    source: type | None,
    level: str = "###",
    defs: Mapping[str, Any] | None = None,
) -> str:
    """One object (or enum) of the schema: a heading with an explicit id, its description, its fields' table.

    A field with neither a description nor a comment is described by the first sentence of the object it holds
    (one of ``defs``), when it holds one.
    """
    lines = [f"{level} {name} {{ #{anchor(prefix, name)} }}", ""]
    description = node.get("description") or (inspect.getdoc(source) if source else "") or ""
    if description:
        lines += [prose(description.strip()), ""]
    if "enum" in node:
        comments = field_comments(source) if source else {}
        members: dict[object, str] = {}
        if isinstance(source, enum.EnumMeta):
            members = {member.value: member.name for member in typing.cast("type[enum.Enum]", source)}
        lines += ["| value | meaning |", "| --- | --- |"]
        for value in node["enum"]:
            lines.append(f"| {code(value)} | {cell(comments.get(members.get(value, ''), ''))} |")
        return "\n".join(lines) + "\n"
    properties = node.get("properties", {})
    if not properties:
        return "\n".join(lines) + "\n"
    required = set(node.get("required", []))
    comments = field_comments(source) if source else {}
    if node.get("additionalProperties") is False:
        lines += ["Unknown fields are refused.", ""]
    lines += ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
    for field, prop in properties.items():
        default = "**required**" if field in required else code(prop["default"]) if "default" in prop else ""
        meaning = prop.get("description") or comments.get(field, "") or _held_summary(prop, defs or {})
        extra = constraints(prop)
        text = cell(meaning)
        if extra:
            text = f"{text} ({'; '.join(extra)})" if text else "; ".join(extra)
        lines.append(f"| `{field}` | {type_of(prop, link)} | {default} | {text} |")
    return "\n".join(lines) + "\n"


def schema_sections(
    schema: Mapping[str, Any],
    prefix: str,
    classes: Mapping[str, type],
    external: Mapping[str, str] | None = None,
    root_name: str | None = None,
) -> str:
    """Every object of ``schema`` (the root first, then its ``$defs`` by name) as Markdown sections.

    Parameters
    ----------
    schema
        A JSON Schema as pydantic writes it (``$defs`` at the top).
    prefix
        Prefix of the sections' ids (two schemas on one site never share an id).
    classes
        The Python classes by schema name, for their docstrings and field comments.
    external
        Definitions documented on another page: name -> that page's URL with its anchor; linked, not repeated.
    root_name
        The heading of the root object (default: the schema's title).

    Returns
    -------
    str
        Markdown: one ``###`` section per object.
    """
    external = dict(external or {})
    defs = schema.get("$defs", {})

    def link(name: str) -> str:
        target = external.get(name, f"#{anchor(prefix, name)}")
        return f"[{name}]({target})"

    root = root_name or str(schema.get("title", "root"))
    sections = [definition_section(root, schema, link, prefix, classes.get(root), defs=defs)]
    for name in sorted(defs):
        if name in external or name == root:
            continue
        sections.append(definition_section(name, defs[name], link, prefix, classes.get(name), defs=defs))
    return "\n".join(sections)

"""Hypothesis strategies of manifest inputs: text mutations of the example, documents mutated from it and from
the schema's shapes, hostile YAML constructs, and raw text and bytes."""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import strategies as st

from spotrun.shape import REPO_ROOT

EXAMPLE_TEXT = (REPO_ROOT / "examples" / "tiny-regression" / "manifest.yaml").read_text()
EXAMPLE = yaml.safe_load(EXAMPLE_TEXT)

# Values a YAML or JSON document may hold, including the ones that broke readers before: huge and out-of-range
# numbers, NaN, surrogates, control characters, very long strings.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["", "s3://", "s3://bkt/x/", "..", "/abs", "SIGKILL", "rate(1 days)", "2026-02-31"]),
    st.text(min_size=300, max_size=2_000),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(st.text(max_size=12), children, max_size=5),
    ),
    max_leaves=25,
)

# YAML fragments PyYAML resolves to things that do not construct, nest or expand as a manifest may.
HOSTILE_FRAGMENTS = [
    "2026-02-31",
    "2026-13-01 25:61:61",
    "1" * 4400,
    "-0x" + "f" * 5000,
    "1e99999",
    ".nan",
    "!!binary aGVsbG8=",
    "!!set {a, b}",
    "!!python/object:os.system [ls]",
    "!!timestamp nope",
    "!!int abc",
    "&a [*a]",
    "*undefined",
    "[" * 200 + "]" * 200,
    "{" * 70 + "}" * 70,
    '"\\ud83d"',
    '"\\ud83d\\ude00"',
    "{<<: {a: 1}, b: 2}",
    "{<<: [1, 2]}",
    "{<<: *nope}",
    "? [a, b]\n  : c",
    "|\n  block\n  text",
    "'unterminated",
    "\t tab",
    "\x00",
    "\ufeff",
    "%YAML 1.1\n---",
    "---\n---",
]


def _set_path(document: Any, path: list[Any], value: Any) -> Any:
    """A copy of ``document`` with ``value`` at ``path`` (keys that are not there are added)."""
    if not path:
        return value
    head, *rest = path
    if isinstance(document, dict):
        copy = dict(document)
        copy[head] = _set_path(copy.get(head), rest, value)
        return copy
    if isinstance(document, list) and document:
        copy = list(document)
        index = hash(head) % len(copy)
        copy[index] = _set_path(copy[index], rest, value)
        return copy
    return _set_path({}, path, value)


FIELD_PATHS = [
    ["name"],
    ["version"],
    ["resources"],
    ["resources", "nodes"],
    ["resources", "gpu_names"],
    ["resources", "instance_types"],
    ["capacity", "max_price_per_hour"],
    ["capacity", "spot"],
    ["data", "inputs"],
    ["data", "inputs", 0, "source"],
    ["data", "inputs", 0, "destination"],
    ["training", "command"],
    ["training", "env"],
    ["training", "checkpoint", "signal"],
    ["training", "max_runtime_minutes"],
    ["archive", "destination"],
    ["archive", "storage_class"],
    ["budget", "max_usd"],
    ["schedule"],
    ["schedule", "expression"],
    ["tags"],
    ["unknown"],
]


@st.composite
def mutated_documents(draw: st.DrawFn) -> Any:
    """The example (or a schema-shaped part of it) with some fields replaced by arbitrary values."""
    document: Any = dict(EXAMPLE)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        document = _set_path(document, draw(st.sampled_from(FIELD_PATHS)), draw(values))
    if draw(st.booleans()):
        document.pop(draw(st.sampled_from(sorted(document))), None)
    return document


def render(document: Any, as_json: bool) -> str:
    """The document as JSON (surrogates kept as escapes) or as YAML."""
    if as_json:
        return json.dumps(document, allow_nan=True)
    return yaml.safe_dump(document, allow_unicode=False)


@st.composite
def text_mutations(draw: st.DrawFn, base: str = EXAMPLE_TEXT) -> str:
    """The example's text with slices deleted, duplicated or replaced, and hostile fragments inserted."""
    text = base
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        start = draw(st.integers(min_value=0, max_value=len(text)))
        end = draw(st.integers(min_value=start, max_value=min(len(text), start + 60)))
        kind = draw(st.sampled_from(["delete", "duplicate", "replace", "hostile"]))
        if kind == "delete":
            text = text[:start] + text[end:]
        elif kind == "duplicate":
            text = text[:end] + text[start:end] + text[end:]
        elif kind == "replace":
            text = text[:start] + draw(st.text(max_size=20)) + text[end:]
        else:
            text = text[:start] + draw(st.sampled_from(HOSTILE_FRAGMENTS)) + text[end:]
    return text


@st.composite
def hostile_documents(draw: st.DrawFn) -> str:
    """The example with one field's value replaced by a hostile YAML fragment."""
    field = draw(st.sampled_from(["name", "tags", "budget", "resources", "training"]))
    fragment = draw(st.sampled_from(HOSTILE_FRAGMENTS))
    lines = [line for line in EXAMPLE_TEXT.splitlines() if not line.startswith(f"{field}:")]
    return "\n".join(lines) + f"\n{field}: {fragment}\n"


def manifest_inputs() -> st.SearchStrategy[str | bytes]:
    """Every kind of input, as the S3 path receives it (text or raw bytes)."""
    documents = st.builds(render, mutated_documents(), st.booleans())
    return st.one_of(
        documents,
        text_mutations(),
        text_mutations(json.dumps(EXAMPLE, indent=1)),
        hostile_documents(),
        st.text(max_size=200),
        st.binary(max_size=200),
    )

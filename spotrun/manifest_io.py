"""Reading manifests: YAML or JSON text to a validated :class:`~spotrun.manifest.JobManifest`, with errors a
person can act on (one line per problem, each naming its field), and the JSON Schema for editors and docs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from pydantic import ValidationError

from spotrun.manifest import JobManifest


class ManifestError(ValueError):
    """A manifest that cannot be accepted, with one readable line per problem."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def _location(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts) or "(manifest)"


def describe_validation_error(error: ValidationError) -> list[str]:
    """Turn a pydantic error into one line per problem, each naming its field.

    Parameters
    ----------
    error
        The error raised by :meth:`JobManifest.model_validate`.

    Returns
    -------
    list[str]
        Lines such as ``"resources.gpus_per_node: Input should be greater than or equal to 1"``.
    """
    return describe_error_items(error.errors())


def describe_error_items(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """:func:`describe_validation_error` for pydantic's error dicts (``loc``, ``msg``, ``type``)."""
    lines = []
    for item in items:
        # Model-level validators report an empty location; their message already names the fields.
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; see `spotrun schema`)"
        elif item["type"] == "missing":
            message = "required field is missing"
        lines.append(f"{_location(item['loc'])}: {message}")
    return lines


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses a key given twice in one mapping (the second would silently win)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} appears twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_manifest_text(text: str | bytes) -> JobManifest:
    """Parse and validate a manifest given as YAML or JSON text.

    Parameters
    ----------
    text
        The manifest's content. JSON is a subset of YAML, so one parser reads both.

    Returns
    -------
    JobManifest
        The validated manifest.

    Raises
    ------
    ManifestError
        With every problem found, each naming its field.
    """
    try:
        document = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ManifestError(
            [f"(manifest): not valid YAML or JSON{where}: {getattr(exc, 'problem', exc)}"]
        ) from exc
    return parse_manifest_document(document)


def parse_manifest_document(document: Any) -> JobManifest:
    """Validate an already-parsed manifest document.

    Parameters
    ----------
    document
        The mapping read from YAML or JSON.

    Returns
    -------
    JobManifest
        The validated manifest.

    Raises
    ------
    ManifestError
        With every problem found, each naming its field.
    """
    if not isinstance(document, dict):
        raise ManifestError(["(manifest): must be a mapping of fields, such as name: and training:"])
    try:
        return JobManifest.model_validate(document)
    except ValidationError as exc:
        raise ManifestError(describe_validation_error(exc)) from exc


def manifest_json_schema() -> str:
    """Return the manifest's JSON Schema, pretty-printed.

    Returns
    -------
    str
        The JSON Schema (draft 2020-12) generated from :class:`JobManifest`.
    """
    schema = JobManifest.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "spotrun job manifest"
    return json.dumps(schema, indent=2, sort_keys=True)

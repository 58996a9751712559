"""Reading manifests: YAML or JSON text to a validated :class:`~spotrun.model.manifest.schema.JobManifest`,
with errors a person can act on (one line per problem, each naming its field), and the JSON Schema for editors and docs.
"""

from __future__ import annotations

import json
import shlex
import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from spotrun.model.manifest.json_text import MAX_MANIFEST_BYTES, UnreadableManifest
from spotrun.model.manifest.schema import JobManifest

__all__ = ["MAX_MANIFEST_BYTES", "ManifestError", "bound_errors", "parse_manifest_text"]

# What a refusal keeps: enough to act on, and a record far below DynamoDB's 400 KB item limit whatever the input
# (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html; moto enforces it too).
MAX_ERRORS = 50
MAX_ERROR_CHARS = 300
MAX_LOCATION_CHARS = 120


def bound_errors(errors: list[str]) -> list[str]:
    """At most :data:`MAX_ERRORS` lines of at most :data:`MAX_ERROR_CHARS` characters, and a count of the rest.

    Parameters
    ----------
    errors
        One line per problem.

    Returns
    -------
    list[str]
        The first lines (each cut with "..." when too long), then ``"... and N more problem(s)"`` if any were
        left out.
    """
    kept = [line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 3] + "..." for line in errors]
    if len(kept) > MAX_ERRORS:
        kept = [*kept[:MAX_ERRORS], f"... and {len(errors) - MAX_ERRORS} more problem(s)"]
    return kept


class ManifestError(ValueError):
    """A manifest that cannot be accepted, with one readable line per problem (bounded: see bound_errors)."""

    def __init__(self, errors: list[str]):
        self.count = len(errors)
        self.errors = bound_errors(errors)
        super().__init__("; ".join(self.errors))


def _location(loc: tuple[int | str, ...]) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(("." if parts else "") + str(part))
    where = "".join(parts) or "(manifest)"
    # A key may be any text: keep the location short enough that the problem itself is never cut away.
    return where if len(where) <= MAX_LOCATION_CHARS else where[: MAX_LOCATION_CHARS - 3] + "..."


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


def _field_names(annotation: Any, path: Sequence[int | str]) -> list[str]:
    """The field names (as written in a manifest) of the model found at ``path`` under ``annotation``.

    Lists and mappings are stepped through by their item type; a union tries each member; a path part that
    names no field of a model is a union member's tag that pydantic put into the location, and is skipped.
    """
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _field_names(args[0], path)
    if origin in (Union, types.UnionType):
        return next((names for arg in args if (names := _field_names(arg, path))), [])
    if isinstance(origin, type) and issubclass(origin, Sequence | Mapping | set | frozenset):
        return _field_names(args[-1], path[1:]) if args and path else []
    if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return []
    fields = {(info.alias or name): info for name, info in annotation.model_fields.items()}
    if not path:
        return list(fields)
    if path[0] in fields:
        return _field_names(fields[str(path[0])].annotation, path[1:])
    return _field_names(annotation, path[1:])


def _unknown_field(loc: Sequence[int | str]) -> str:
    """``unknown field; did you mean 'command'?``: the closest field of the same model, when one is close."""
    # Imported here: only a refused manifest needs it, and the functions that read manifests skip its import.
    import difflib

    names = _field_names(JobManifest, loc[:-1]) if loc and isinstance(loc[-1], str) else []
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6) if names else []
    hint = f"did you mean {close[0]!r}?" if close else "check the spelling"
    return f"unknown field; {hint} (see `spotrun schema`)"


def _one_string_for_a_list(text: str) -> str:
    """The hint for a string given where a list is due: the list it most likely meant (split as a shell would)."""
    try:
        words = shlex.split(text)
    except ValueError:  # an unclosed quote: split on white space
        words = text.split()
    return f"must be a list, not one string: write {json.dumps(words or [text])}"


def describe_error_items(items: Sequence[Mapping[str, Any]]) -> list[str]:
    """:func:`describe_validation_error` for pydantic's error dicts (``loc``, ``msg``, ``type``).

    The one home of the manifest's error wording: an unknown field gets the closest known name of its model
    (at any depth), a string where a list is due (``command: "python train.py"``) the list it meant.
    """
    lines = []
    for item in items:
        # Model-level validators report an empty location; their message already names the fields.
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = _unknown_field(tuple(item["loc"]))
        elif item["type"] == "missing":
            message = "required field is missing"
        elif item["type"] == "list_type" and isinstance(item.get("input"), str):
            message = _one_string_for_a_list(item["input"])
        lines.append(f"{_location(item['loc'])}: {message}")
    return lines


def parse_manifest_text(text: str | bytes) -> JobManifest:
    """Parse and validate a manifest given as YAML or JSON text.

    Parameters
    ----------
    text
        The manifest's content: JSON (read as the REST API reads it), else YAML; at most
        :data:`MAX_MANIFEST_BYTES`, and bounded in depth and alias expansion (see
        :mod:`spotrun.model.manifest.yaml_text`).

    Returns
    -------
    JobManifest
        The validated manifest.

    Raises
    ------
    ManifestError
        With every problem found, each naming its field.
    """
    # PyYAML is loaded on the first text read, not with this module: the REST API validates JSON bodies with
    # this module and never reads YAML, and the import is most of its reader's cost (docs/development/cold-start.md).
    from spotrun.model.manifest.yaml_text import load_document

    try:
        document = load_document(text)
    except UnreadableManifest as exc:
        raise ManifestError([str(exc)]) from exc
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

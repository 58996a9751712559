"""Reading a manifest or a REST API body as JSON, within the bounds every manifest reader keeps.

JSON needs no parser beyond :func:`json.loads`, and the REST API reads only JSON: this module is all it loads of
the manifest readers (the YAML reader, :mod:`spotrun.model.manifest.yaml_text`, builds on it and brings PyYAML).
A key given twice, nesting past :data:`MAX_DEPTH` and an unpaired UTF-16 surrogate are refused here as there.
"""

from __future__ import annotations

import json
from typing import Any, Final

# The largest manifest read, as the REST API's body limit: far above any real manifest (a few KiB).
MAX_MANIFEST_BYTES: Final = 256 * 1024
# Deeper than any manifest's structure (4 levels) by far, and shallow enough for every recursive reader.
MAX_DEPTH: Final = 64


class UnreadableManifest(ValueError):
    """The text cannot be read as a document; the message names the problem (and its line when known)."""


def where(mark: Any) -> str:
    """`` at line L, column C`` for a parser's position mark (PyYAML's), or nothing without one."""
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def join_surrogates(value: str, mark: Any) -> str:
    """Join UTF-16 surrogate pairs (how JSON and YAML escape characters outside the BMP); refuse lone ones."""
    if not any("\ud800" <= char <= "\udfff" for char in value):
        return value
    try:
        return value.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeDecodeError:
        raise UnreadableManifest(
            f"(manifest): a string holds an unpaired UTF-16 surrogate{where(mark)}; "
            "escape a character outside the BMP as a pair, e.g. \\ud83d\\ude00"
        ) from None


def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' ``object_pairs_hook``: a mapping, refused when a key appears twice."""
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key appears twice")  # read again as YAML, which names the key and its line
    return dict(pairs)


def check_plain(document: Any) -> None:
    """Depth and surrogate checks of a document read as JSON (it has no aliases: its size is the text's)."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise UnreadableManifest(f"(manifest): nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, str):
            join_surrogates(value, None)
        elif isinstance(value, dict):
            for key, item in value.items():
                join_surrogates(key, None)
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)


def load_json(text: str | bytes) -> tuple[bool, Any]:
    """Whether ``text`` is JSON, and its document if so (unchecked: :func:`check_plain` checks it)."""
    try:
        return True, json.loads(text, object_pairs_hook=unique_pairs)
    except (ValueError, RecursionError):
        return False, None  # not JSON (or JSON that YAML reports better): read as YAML


def read_json_body(text: str) -> Any:
    """``json.loads`` for the REST API's bodies, within the same bounds as the manifest reader
    (:func:`spotrun.model.manifest.yaml_text.load_document`).

    What ``json.loads`` cannot read (nesting past its recursion limit, an integer past Python's digit limit) and
    what the S3 path refuses (nesting past :data:`MAX_DEPTH`, an unpaired surrogate, a key given twice) is raised
    as :class:`json.JSONDecodeError`, which the API answers as a 400 naming the problem, never a 500.

    Parameters
    ----------
    text
        The request's body.

    Returns
    -------
    Any
        The document.
    """
    try:
        document = json.loads(text, object_pairs_hook=unique_pairs)
        check_plain(document)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels", text, 0) from None
    except ValueError as exc:  # UnreadableManifest included
        raise json.JSONDecodeError(str(exc).removeprefix("(manifest): "), text, 0) from None
    return document

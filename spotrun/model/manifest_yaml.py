"""Reading a manifest's text into a plain document, with bounded time and memory whatever the text holds.

A manifest comes from users (a file dropped in S3, a ``spotrun validate`` run), so its reader must survive
hostile YAML: a document nested thousands of levels deep (PyYAML's composer recurses and would raise
``RecursionError``), an "alias bomb" whose anchors expand a few kilobytes into gigabytes, values PyYAML's
constructors cannot build (a 31st of February, an integer past Python's digit limit), keys that are not hashable.
Each of these ends here as :class:`UnreadableManifest` naming the problem and, where known, its line.

JSON is read by :func:`json.loads` first, as the REST API reads its bodies, so a JSON manifest means the same
on both paths (escaped characters outside the BMP such as ``"\\ud83d\\ude00"`` included); anything else is YAML.
"""

from __future__ import annotations

import json
from typing import Any, Final

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

# The largest manifest read, as the REST API's body limit: far above any real manifest (a few KiB).
MAX_MANIFEST_BYTES: Final = 256 * 1024
# Deeper than any manifest's structure (4 levels) by far, and shallow enough for every recursive reader.
MAX_DEPTH: Final = 64
# What the document may weigh once every alias and merge key is expanded (characters of scalars plus one per
# node): no more than a manifest written out in full could, so an expanded document is never larger than the
# body limit allows.
MAX_EXPANDED_SIZE: Final = MAX_MANIFEST_BYTES
_MERGE_TAG: Final = "tag:yaml.org,2002:merge"


class UnreadableManifest(ValueError):
    """The text cannot be read as a document; the message names the problem (and its line when known)."""


def _where(mark: Any) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _join_surrogates(value: str, mark: Any) -> str:
    """Join UTF-16 surrogate pairs (how JSON and YAML escape characters outside the BMP); refuse lone ones."""
    if not any("\ud800" <= char <= "\udfff" for char in value):
        return value
    try:
        return value.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeDecodeError:
        raise UnreadableManifest(
            f"(manifest): a string holds an unpaired UTF-16 surrogate{_where(mark)}; "
            "escape a character outside the BMP as a pair, e.g. \\ud83d\\ude00"
        ) from None


class _BoundedLoader(yaml.SafeLoader):
    """A safe loader with a depth limit, unique keys, merge keys, and constructor errors turned into refusals."""

    def __init__(self, stream: str | bytes) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        # The composer recurses once per level: stop long before Python's recursion limit.
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise UnreadableManifest(
                    f"(manifest): nested deeper than {MAX_DEPTH} levels{_where(self.peek_event().start_mark)}"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (yaml.YAMLError, UnreadableManifest):
            raise
        except Exception as exc:
            # e.g. "2026-02-31" (day is out of range for month), an integer past Python's digit limit, or
            # "!!timestamp nope" (AttributeError): a value that cannot be built is the manifest's problem.
            raise UnreadableManifest(
                f"(manifest): the value {str(node.value)[:40]!r}{_where(node.start_mark)} cannot be read: {exc}"
            ) from None

    def construct_scalar(self, node: ScalarNode | MappingNode) -> Any:
        value = super().construct_scalar(node)
        return _join_surrogates(value, node.start_mark) if isinstance(value, str) else value

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        # A key given twice would silently win; merge keys (<<) are YAML's way to reuse a mapping, and the keys
        # they bring in may be overridden, so only the mapping's own keys are checked.
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # unhashable: the base class refuses it with its mark
            if duplicate:
                raise ConstructorError(None, None, f"the key {key!r} appears twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def check_expansion(root: Node) -> None:
    """Refuse a node graph that is recursive or expands past :data:`MAX_EXPANDED_SIZE` or :data:`MAX_DEPTH`.

    Aliases make the composed document a graph whose nodes are shared: a walk that visits each node once
    (memoised, iterative) computes what full expansion would weigh without performing it.

    Raises
    ------
    UnreadableManifest
        For a recursive alias, or a document too large or too deep once expanded.
    """
    done: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, expanded depth)
    open_nodes: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            children = _children(node)
            size = 1 + (len(str(node.value)) if isinstance(node, ScalarNode) else 0)
            size += sum(done[id(child)][0] for child in children)
            depth = 1 + max((done[id(child)][1] for child in children), default=0)
            open_nodes.discard(key)
            done[key] = (size, depth)
            if size > MAX_EXPANDED_SIZE:
                raise UnreadableManifest(
                    f"(manifest): the document expands through its aliases to more than {MAX_EXPANDED_SIZE} "
                    f"characters{_where(node.start_mark)}; write the values out or shorten them"
                )
            if depth > MAX_DEPTH:
                raise UnreadableManifest(
                    f"(manifest): nested deeper than {MAX_DEPTH} levels once aliases are expanded"
                    f"{_where(node.start_mark)}"
                )
            continue
        if key in done:
            continue
        if key in open_nodes:
            raise UnreadableManifest(f"(manifest): an alias refers to itself{_where(node.start_mark)}")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node))


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key appears twice")  # read again as YAML, which names the key and its line
    return dict(pairs)


def _check_plain(document: Any) -> None:
    """Depth and surrogate checks of a document read as JSON (it has no aliases: its size is the text's)."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise UnreadableManifest(f"(manifest): nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, str):
            _join_surrogates(value, None)
        elif isinstance(value, dict):
            for key, item in value.items():
                _join_surrogates(key, None)
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            stack.extend((item, depth + 1) for item in value)


def _load_json(text: str | bytes) -> tuple[bool, Any]:
    try:
        return True, json.loads(text, object_pairs_hook=_unique_pairs)
    except (ValueError, RecursionError):
        return False, None  # not JSON (or JSON that YAML reports better): read as YAML


def read_json_body(text: str) -> Any:
    """``json.loads`` for the REST API's bodies, within the same bounds as :func:`load_document`.

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
        document = json.loads(text, object_pairs_hook=_unique_pairs)
        _check_plain(document)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError(f"nested deeper than {MAX_DEPTH} levels", text, 0) from None
    except ValueError as exc:  # UnreadableManifest included
        raise json.JSONDecodeError(str(exc).removeprefix("(manifest): "), text, 0) from None
    return document


def load_document(text: str | bytes) -> Any:
    """Read a manifest's text (JSON, else YAML) into a plain document, within the bounds above.

    Parameters
    ----------
    text
        The manifest's content.

    Returns
    -------
    Any
        The document (a mapping for any manifest; ``None`` for empty text).

    Raises
    ------
    UnreadableManifest
        When the text is too large, not YAML or JSON, or hostile (too deep, expanding too far, recursive).
    """
    size = len(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    if size > MAX_MANIFEST_BYTES:
        raise UnreadableManifest(
            f"(manifest): {size} bytes; a manifest may hold at most {MAX_MANIFEST_BYTES} bytes (256 KiB)"
        )
    is_json, document = _load_json(text)
    if is_json:
        _check_plain(document)
        return document
    try:
        loader = _BoundedLoader(text)  # the reader decodes and checks the first characters already
    except yaml.YAMLError as exc:
        raise UnreadableManifest(f"(manifest): not valid YAML or JSON: {exc}") from None
    try:
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            check_expansion(node)
            return loader.construct_document(node)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            problem = getattr(exc, "problem", None) or exc
            raise UnreadableManifest(f"(manifest): not valid YAML or JSON{_where(mark)}: {problem}") from None
        except RecursionError:
            raise UnreadableManifest("(manifest): too deeply nested to be read") from None
    finally:
        loader.dispose()

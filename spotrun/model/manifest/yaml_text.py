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

from typing import Any, Final

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from spotrun.model.manifest.json_text import (
    MAX_DEPTH,
    MAX_MANIFEST_BYTES,
    UnreadableManifest,
    check_plain,
    join_surrogates,
    load_json,
    where,
)

# What the document may weigh once every alias and merge key is expanded (characters of scalars plus one per
# node): no more than a manifest written out in full could, so an expanded document is never larger than the
# body limit allows.
MAX_EXPANDED_SIZE: Final = MAX_MANIFEST_BYTES
_MERGE_TAG: Final = "tag:yaml.org,2002:merge"


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
                    f"(manifest): nested deeper than {MAX_DEPTH} levels{where(self.peek_event().start_mark)}"
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
                f"(manifest): the value {str(node.value)[:40]!r}{where(node.start_mark)} cannot be read: {exc}"
            ) from None

    def construct_scalar(self, node: ScalarNode | MappingNode) -> Any:
        value = super().construct_scalar(node)
        return join_surrogates(value, node.start_mark) if isinstance(value, str) else value

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
                    f"characters{where(node.start_mark)}; write the values out or shorten them"
                )
            if depth > MAX_DEPTH:
                raise UnreadableManifest(
                    f"(manifest): nested deeper than {MAX_DEPTH} levels once aliases are expanded"
                    f"{where(node.start_mark)}"
                )
            continue
        if key in done:
            continue
        if key in open_nodes:
            raise UnreadableManifest(f"(manifest): an alias refers to itself{where(node.start_mark)}")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node))


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
    is_json, document = load_json(text)
    if is_json:
        check_plain(document)
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
            raise UnreadableManifest(f"(manifest): not valid YAML or JSON{where(mark)}: {problem}") from None
        except RecursionError:
            raise UnreadableManifest("(manifest): too deeply nested to be read") from None
    finally:
        loader.dispose()

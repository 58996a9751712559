"""Policy strings as IAM reads them: wildcards, policy variables and the segments of an ARN.

A policy string is cut into parts: literal text, ``*`` (any run of characters), ``?`` (one character), and
``${...}`` forms. ``${*}``, ``${?}`` and ``${$}`` are the characters themselves; ``${key}`` is the request
context's value of ``key`` (names ignore case), ``${key, 'default'}`` the default when the key is absent
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html#policy-vars-specialchars,
#policy-vars-default-values). A variable with no value and no default raises :class:`Unresolved`: IAM holds
the statement invalid (#policy-vars-no-value), and the evaluator then leaves the statement out. A multivalued
key is no variable (reference_policies_condition-single-vs-multi-valued-context-keys.html, "Key points").
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

_FORMS = re.compile(r"\$\{([^{}]*)\}|[*?]")
_VARIABLE = re.compile(r"\s*([^\s,'{}]+)\s*(?:,\s*'((?:[^']|'')*)'\s*)?")
_SPECIAL = {"*": "*", "?": "?", "$": "$"}

# How many colons come before an ARN's resource part: arn:partition:service:region:account:resource
# (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference-arns.html).
_ARN_HEAD = 5


class Unresolved(LookupError):
    """A policy variable names a key the request does not carry (and gives no default)."""


class Mode(enum.Enum):
    """How a pattern's wildcards and colons match.

    ``EXACT``: no wildcards (``StringEquals``: ``*`` is a character). ``TEXT``: ``*`` and ``?`` over any
    characters (``StringLike``, actions). ``ARN``: each of the six colon-delimited parts separately, as the ARN
    condition operators do. ``RESOURCE``: a ``Resource`` element's ARN, where a ``*`` that ends one of the first
    five parts may run past the colon (reference_policies_elements_resource.html, "Using wildcards in resource
    ARNs").
    """

    EXACT = "exact"
    TEXT = "text"
    ARN = "arn"
    RESOURCE = "resource"


class Wild(enum.Enum):
    """A wildcard part of a pattern."""

    ANY = "*"
    ONE = "?"


# A literal from the policy, a variable's value (never counted as ARN structure), or a wildcard.
Part = tuple[str, str] | Wild


def lowered(context: Mapping[str, Any] | None) -> dict[str, Any]:
    """The request context keyed by lower-case names: IAM ignores the case of condition key names
    (reference_policies_variables.html#policy-vars-infoallreqs, "Key names are case-insensitive")."""
    return {key.lower(): value for key, value in (context or {}).items()}


def scalar_text(value: Any) -> str:
    """A single context or policy value as text; booleans as IAM writes them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def _variable(name: str, default: str | None, context: Mapping[str, Any]) -> str:
    value = context.get(name.lower())
    if value is None or isinstance(value, list | tuple | set | frozenset):
        if default is None:
            raise Unresolved(name)
        return default.replace("''", "'")
    return scalar_text(value)


def parts(pattern: str, context: Mapping[str, Any]) -> tuple[Part, ...]:
    """``pattern`` cut into parts, its variables replaced from ``context`` (lower-case keys).

    Raises
    ------
    Unresolved
        A variable's key is absent from ``context`` and the variable gives no default.
    """
    found: list[Part] = []
    position = 0
    for form in _FORMS.finditer(pattern):
        found.append(("lit", pattern[position : form.start()]))
        inner = form.group(1)
        if inner is None:
            found.append(Wild.ANY if form.group() == "*" else Wild.ONE)
        elif inner in _SPECIAL:
            found.append(("sub", _SPECIAL[inner]))
        elif (variable := _VARIABLE.fullmatch(inner)) is not None:
            found.append(("sub", _variable(variable.group(1), variable.group(2), context)))
        else:
            found.append(("lit", form.group()))
        position = form.end()
    found.append(("lit", pattern[position:]))
    return tuple(part for part in found if isinstance(part, Wild) or part[1])


def _wildcard(part: Wild, mode: Mode, segment: int, ends_segment: bool) -> str:
    if mode is Mode.EXACT:
        return re.escape(part.value)
    if mode is Mode.TEXT or segment >= _ARN_HEAD:
        return ".*" if part is Wild.ANY else "."
    if part is Wild.ANY:
        return ".*" if mode is Mode.RESOURCE and ends_segment else "[^:]*"
    return "[^:]"


@lru_cache(maxsize=8192)
def compiled(pattern: tuple[Part, ...], mode: Mode, ignore_case: bool = False) -> re.Pattern[str]:
    """The regular expression that matches what ``pattern`` (from :func:`parts`) matches in ``mode``."""
    out: list[str] = []
    segment = 0
    for index, part in enumerate(pattern):
        if isinstance(part, Wild):
            following = pattern[index + 1] if index + 1 < len(pattern) else None
            ends = following is None or (
                not isinstance(following, Wild) and following[0] == "lit" and following[1].startswith(":")
            )
            out.append(_wildcard(part, mode, segment, ends))
            continue
        kind, text = part
        out.append(re.escape(text))
        if kind == "lit" and mode in (Mode.ARN, Mode.RESOURCE):
            segment += text.count(":")
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    return re.compile("".join(out), flags)


def matches(
    pattern: str, value: str, mode: Mode, context: Mapping[str, Any], ignore_case: bool = False
) -> bool:
    """Whether ``value`` matches the policy string ``pattern`` in ``mode``.

    Raises
    ------
    Unresolved
        ``pattern`` holds a variable that ``context`` cannot fill.
    """
    return compiled(parts(pattern, context), mode, ignore_case).fullmatch(value) is not None

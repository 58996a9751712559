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
from typing import Any, NamedTuple, cast

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

    # Members are singletons: hashing by identity keeps the regex caches' lookups in C (a hot path).
    __hash__ = object.__hash__


class Wild(enum.Enum):
    """A wildcard part of a pattern."""

    ANY = "*"
    ONE = "?"

    __hash__ = object.__hash__


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


class _Variable(NamedTuple):
    name: str
    default: str | None


@lru_cache(maxsize=8192)
def _template(pattern: str) -> tuple[tuple[Part | _Variable, ...], bool]:
    """``pattern`` cut into parts, its variables still unfilled; and whether it has any."""
    found: list[Part | _Variable] = []
    position = 0
    for form in _FORMS.finditer(pattern):
        found.append(("lit", pattern[position : form.start()]))
        inner = form.group(1)
        if inner is None:
            found.append(Wild.ANY if form.group() == "*" else Wild.ONE)
        elif inner in _SPECIAL:
            found.append(("sub", _SPECIAL[inner]))
        elif (variable := _VARIABLE.fullmatch(inner)) is not None:
            found.append(_Variable(variable.group(1), variable.group(2)))
        else:
            found.append(("lit", form.group()))
        position = form.end()
    found.append(("lit", pattern[position:]))
    kept = tuple(part for part in found if isinstance(part, Wild | _Variable) or part[1])
    return kept, any(isinstance(part, _Variable) for part in kept)


def parts(pattern: str, context: Mapping[str, Any]) -> tuple[Part, ...]:
    """``pattern`` cut into parts, its variables replaced from ``context`` (lower-case keys).

    Raises
    ------
    Unresolved
        A variable's key is absent from ``context`` and the variable gives no default.
    """
    template, has_variables = _template(pattern)
    if not has_variables:
        return cast(tuple[Part, ...], template)
    return tuple(
        ("sub", _variable(part.name, part.default, context)) if isinstance(part, _Variable) else part
        for part in template
    )


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


@lru_cache(maxsize=8192)
def _fixed(pattern: str, mode: Mode, ignore_case: bool) -> re.Pattern[str]:
    # A pattern without variables compiles once, keyed by its text (most patterns: actions, ARNs).
    return compiled(cast(tuple[Part, ...], _template(pattern)[0]), mode, ignore_case)


def matches(
    pattern: str, value: str, mode: Mode, context: Mapping[str, Any], ignore_case: bool = False
) -> bool:
    """Whether ``value`` matches the policy string ``pattern`` in ``mode``.

    Raises
    ------
    Unresolved
        ``pattern`` holds a variable that ``context`` cannot fill.
    """
    if not _template(pattern)[1]:
        return _fixed(pattern, mode, ignore_case).fullmatch(value) is not None
    return compiled(parts(pattern, context), mode, ignore_case).fullmatch(value) is not None


def matches_any(
    patterns: list[str], value: str, mode: Mode, context: Mapping[str, Any], ignore_case: bool = False
) -> bool:
    """Whether ``value`` matches one of ``patterns``; every variable is filled first, so an unfillable one
    raises :class:`Unresolved` whichever pattern holds it."""
    filled = [parts(pattern, context) for pattern in patterns if _template(pattern)[1]]
    if any(
        matches(pattern, value, mode, context, ignore_case)
        for pattern in patterns
        if not _template(pattern)[1]
    ):
        return True
    return any(compiled(found, mode, ignore_case).fullmatch(value) is not None for found in filled)

"""A small IAM policy evaluator: the emulator's judge of job credentials, and the infra tests' offline one.

moto's access control cannot judge spotrun's policies: it evaluates ``StringEquals`` alone, supplies condition
values only to role trust policies (``moto/iam/access_control.py``) and ignores session policies. This follows
IAM's documented logic for what spotrun uses
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html): an explicit Deny
wins, otherwise one matching Allow is needed; every condition operator of a statement must hold (AND), any of an
operator's values may match (OR); a key absent from the request fails every operator but ``Null``. Resources and
``*Like`` values match with IAM's wildcards, ``*`` (any run of characters) and ``?`` (one), and ``${*}``, ``${?}``
and ``${$}`` stand for those characters themselves
(https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_variables.html#policy-vars-specialchars).
A session's permissions are the intersection of its role's policy and its session policy
(https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies.html#policies_session): :func:`allowed_by_all`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

Normalize = Callable[[Any], str]

_TOKENS = re.compile(r"\$\{[*?$]\}|[*?]")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _values(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


@lru_cache(maxsize=4096)
def _pattern(text: str) -> re.Pattern[str]:
    parts: list[str] = []
    position = 0
    for token in _TOKENS.finditer(text):
        parts.append(re.escape(text[position : token.start()]))
        found = token.group()
        parts.append(".*" if found == "*" else "." if found == "?" else re.escape(found[2]))
        position = token.end()
    parts.append(re.escape(text[position:]))
    return re.compile("".join(parts), re.DOTALL)


def like(pattern: str, value: str) -> bool:
    """Whether ``value`` matches the IAM pattern ``pattern`` (wildcards and literal ``${...}`` forms)."""
    return _pattern(pattern).fullmatch(value) is not None


def _holds(operator: str, key: str, expected: Any, context: Mapping[str, Any], normalize: Normalize) -> bool:
    wanted = [normalize(v) if not isinstance(v, bool) else str(v).lower() for v in _values(expected)]
    if operator == "Null":
        return (key not in context) == (wanted[0] == "true")
    if key not in context:
        return False
    actual = [str(v).lower() if isinstance(v, bool) else str(v) for v in _values(context[key])]
    if operator in ("StringEquals", "ArnEquals"):
        return any(a == w for a in actual for w in wanted)
    if operator in ("StringLike", "ArnLike"):
        return any(like(w, a) for a in actual for w in wanted)
    if operator == "Bool":
        return any(a == w for a in actual for w in wanted)
    raise NotImplementedError(f"condition operator {operator} is not modelled")


def _matches(
    statement: Mapping[str, Any], action: str, resource: str, context: Mapping[str, Any], normalize: Normalize
) -> bool:
    if not any(like(a, action) for a in _values(statement["Action"])):
        return False
    if not any(like(normalize(r), resource) for r in _values(statement["Resource"])):
        return False
    return all(
        _holds(operator, key, expected, context, normalize)
        for operator, block in (statement.get("Condition") or {}).items()
        for key, expected in block.items()
    )


def allowed(
    statements: Sequence[Mapping[str, Any]],
    action: str,
    resource: str,
    context: Mapping[str, Any] | None = None,
    *,
    normalize: Normalize = _text,
) -> bool:
    """Whether the policy ``statements`` allow ``action`` on ``resource`` in ``context``.

    Parameters
    ----------
    statements
        The statements of one or more policies applying together (a role's identity policies).
    action, resource
        The request: ``s3:GetObject`` on ``arn:aws:s3:::bucket/key``.
    context
        Condition keys of the request (``{"s3:prefix": "jobs/x/"}``); a key absent is absent.
    normalize
        Turns a policy's resource or condition value into text (the infra tests flatten CloudFormation
        intrinsics with it); plain text by default.
    """
    context = context or {}
    matching = [s for s in statements if _matches(s, action, resource, context, normalize)]
    return not any(s["Effect"] == "Deny" for s in matching) and any(s["Effect"] == "Allow" for s in matching)


def allowed_by_all(
    policies: Sequence[Sequence[Mapping[str, Any]]],
    action: str,
    resource: str,
    context: Mapping[str, Any] | None = None,
    *,
    normalize: Normalize = _text,
) -> bool:
    """Whether every one of ``policies`` allows the request: a role's policy intersected with a session policy."""
    return all(allowed(p, action, resource, context, normalize=normalize) for p in policies)

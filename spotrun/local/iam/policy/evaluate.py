"""IAM's policy evaluation, offline: the emulator's judge of credentials, and the infra tests' one.

What it follows (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html):
an explicit Deny in any applying statement wins, otherwise one applying Allow is needed, otherwise the request
is implicitly denied. A statement applies when its ``Action`` (or ``NotAction``) names the action, its
``Resource`` (or ``NotResource``) the resource, and every condition holds (operators ANDed, keys ANDed, values
ORed, NORed for a negated operator). Actions and condition key names ignore case; resources and condition values
do not (except the ``...IgnoreCase`` operators). A resource ARN is matched part by part
(reference_policies_elements_resource.html); the ARN condition operators compare each of the six parts
separately. Policy variables (``${aws:username}``, ``${aws:PrincipalTag/team}``, ``${key, 'default'}``) are
filled from the request context in resources and in String, ARN and Bool condition values; ``${*}``, ``${?}``
and ``${$}`` are those characters. A statement with a variable that the request cannot fill does not apply
(reference_policies_variables.html: such a statement is invalid). The operators and their treatment of absent
keys are in :mod:`spotrun.local.iam.policy.conditions`. An operator IAM does not define raises
:class:`UnknownOperator` (IAM refuses such a policy), so a typo can neither allow nor silently skip a Deny.
A session's permissions are the intersection of its role's policies and its session policy
(https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies.html#policies_session): :func:`allowed_by_all`.
``Principal`` is not judged: these are identity policies.

Libraries measured before writing this (PyPI, 2026-12): ``iam-ape`` 1.1.6 computes an entity's effective
permissions as sets of actions from an account's authorization report; it evaluates no single request and no
condition. ``policyuniverse`` 1.5.1 parses and expands statements (who is allowed, internet access) but has no
request evaluation. ``principalmapper`` 1.1.5 (last release 2022) does evaluate requests with condition
operators, but matches resources case-insensitively, lets ``*`` span ARN parts, has no ``${*}`` forms, leaves an
unknown variable as text and answers ``StringNotLike`` on an absent key False. moto's
``moto/iam/access_control.py`` judges ``StringEquals`` in role trust policies only and ignores session policies.
``aws-why`` calls AWS's ``SimulatePrincipalPolicy``, which needs an account.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from spotrun.local.iam.policy.conditions import UnknownOperator, holds
from spotrun.local.iam.policy.patterns import Mode, Unresolved, lowered, matches, matches_any, scalar_text

__all__ = ["Decision", "UnknownOperator", "allowed", "allowed_by_all", "decide", "like"]

Normalize = Callable[[Any], str]


class Decision(enum.Enum):
    """The outcome of evaluating one policy set for one request."""

    ALLOW = "allow"
    EXPLICIT_DENY = "explicit-deny"
    IMPLICIT_DENY = "implicit-deny"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _values(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def like(pattern: str, value: str, context: Mapping[str, Any] | None = None) -> bool:
    """Whether ``value`` matches the IAM string pattern ``pattern``: ``*`` and ``?`` wildcards over any
    characters, ``${*}``, ``${?}``, ``${$}`` the characters, variables filled from ``context`` (a variable that
    cannot be filled matches nothing). Case-sensitive, as ``StringLike``."""
    try:
        return matches(pattern, value, Mode.TEXT, lowered(context))
    except Unresolved:
        return False


def _names(statement: Mapping[str, Any], positive: str, negative: str) -> tuple[list[Any], bool]:
    if positive in statement:
        return _values(statement[positive]), False
    if negative in statement:
        return _values(statement[negative]), True
    raise ValueError(f"a statement needs {positive} or {negative}: {dict(statement)!r}")


def _policy_text(value: Any, normalize: Normalize) -> str:
    # Numbers and booleans are JSON scalars in a policy; only strings (or template intrinsics) go to normalize.
    return scalar_text(value) if isinstance(value, bool | int | float) else normalize(value)


def _applies(
    statement: Mapping[str, Any],
    action: str,
    resource: str,
    context: Mapping[str, Any],
    normalize: Normalize,
) -> bool:
    actions, not_action = _names(statement, "Action", "NotAction")
    # Action names ignore case (reference_policies_elements_action.html: "case insensitive").
    named = matches_any([_text(a) for a in actions], action, Mode.TEXT, context, ignore_case=True)
    if named == not_action:
        return False
    resources, not_resource = _names(statement, "Resource", "NotResource")
    # An unfillable variable voids the statement whatever its position in the list (matches_any).
    if matches_any([normalize(r) for r in resources], resource, Mode.RESOURCE, context) == not_resource:
        return False
    conditions = statement.get("Condition") or {}
    verdicts = [
        holds(name, key, expected, context, lambda value: _policy_text(value, normalize))
        for name, block in conditions.items()
        for key, expected in block.items()
    ]
    return all(verdicts)


def decide(
    statements: Sequence[Mapping[str, Any]],
    action: str,
    resource: str,
    context: Mapping[str, Any] | None = None,
    *,
    normalize: Normalize = _text,
) -> Decision:
    """IAM's decision for one request against the statements of one policy set.

    Parameters
    ----------
    statements
        The statements of the policies that apply together (a role's identity policies, managed and inline).
    action, resource
        The request: ``s3:GetObject`` on ``arn:aws:s3:::bucket/key``.
    context
        The request context's condition keys (``{"s3:prefix": "jobs/x/"}``, ``{"aws:username": "bob"}``); a
        key absent is absent; a list is a multivalued key.
    normalize
        Turns a policy's resource or condition string into text (the infra tests flatten CloudFormation
        intrinsics with it); plain text by default.

    Raises
    ------
    UnknownOperator
        A statement uses a condition operator IAM does not define.
    """
    request = lowered(context)
    effects = set()
    for statement in statements:
        try:
            if _applies(statement, action, resource, request, normalize):
                effects.add(statement["Effect"])
        except Unresolved:
            continue
    if "Deny" in effects:
        return Decision.EXPLICIT_DENY
    return Decision.ALLOW if "Allow" in effects else Decision.IMPLICIT_DENY


def allowed(
    statements: Sequence[Mapping[str, Any]],
    action: str,
    resource: str,
    context: Mapping[str, Any] | None = None,
    *,
    normalize: Normalize = _text,
) -> bool:
    """Whether the policy ``statements`` allow ``action`` on ``resource`` in ``context`` (see :func:`decide`)."""
    return decide(statements, action, resource, context, normalize=normalize) is Decision.ALLOW


def allowed_by_all(
    policies: Sequence[Sequence[Mapping[str, Any]]],
    action: str,
    resource: str,
    context: Mapping[str, Any] | None = None,
    *,
    normalize: Normalize = _text,
) -> bool:
    """Whether every one of ``policies`` allows the request: a role's policies intersected with a session
    policy. An explicit Deny in any of them denies; each must hold its own Allow."""
    return all(allowed(p, action, resource, context, normalize=normalize) for p in policies)

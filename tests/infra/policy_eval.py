"""A small offline IAM evaluator for the synthesized template's identity policies, for tests.

moto's access control cannot judge these policies: it evaluates ``StringEquals`` alone and supplies condition
values only to role trust policies (``moto/iam/access_control.py``). This evaluator follows IAM's documented
logic for what the stack uses (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html):
an explicit Deny wins, otherwise one matching Allow is needed; every condition operator of a statement must hold
(AND), any of an operator's values may match (OR); a key absent from the request fails every operator but
``Null``. Resources and ARNs are compared in cdk-nag's flattened form (``<AWS::Region>``, ``<Logical.Arn>``), so a
request names them the same way (:func:`flat`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Any

from infra.nag import flatten_reference
from tests.infra.conftest import Synthesized, ref


def flat(value: Any) -> str:
    """A template value (string or intrinsic) in the form requests are written in."""
    return flatten_reference(value)


def _values(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _like(pattern: str, value: str) -> bool:
    # IAM's * and ? wildcards; fnmatch's [ ] classes never occur in these policies.
    return fnmatch.fnmatchcase(value, pattern)


def _holds(operator: str, key: str, expected: Any, context: Mapping[str, Any]) -> bool:
    wanted = [flat(v) if not isinstance(v, bool) else str(v).lower() for v in _values(expected)]
    if operator == "Null":
        return (key not in context) == (wanted[0] == "true")
    if key not in context:
        return False
    actual = [str(v).lower() if isinstance(v, bool) else str(v) for v in _values(context[key])]
    if operator in ("StringEquals", "ArnEquals"):
        return any(a == w for a in actual for w in wanted)
    if operator in ("StringLike", "ArnLike"):
        return any(_like(w, a) for a in actual for w in wanted)
    if operator == "Bool":
        return any(a == w for a in actual for w in wanted)
    raise NotImplementedError(f"condition operator {operator} is not modelled")


def _matches(statement: Mapping[str, Any], action: str, resource: str, context: Mapping[str, Any]) -> bool:
    if not any(_like(a, action) for a in _values(statement["Action"])):
        return False
    if not any(_like(flat(r), resource) for r in _values(statement["Resource"])):
        return False
    return all(
        _holds(operator, key, expected, context)
        for operator, block in (statement.get("Condition") or {}).items()
        for key, expected in block.items()
    )


def allowed(
    statements: Sequence[Mapping[str, Any]],
    action: str,
    resource: str,
    context: Mapping[str, Any] | None = None,
) -> bool:
    """Whether the identity policy ``statements`` allow ``action`` on ``resource`` in ``context``."""
    context = context or {}
    matching = [s for s in statements if _matches(s, action, resource, context)]
    return not any(s["Effect"] == "Deny" for s in matching) and any(s["Effect"] == "Allow" for s in matching)


def role_statements(synthesized: Synthesized, role_id: str) -> list[dict[str, Any]]:
    """Every statement of the inline policies attached to ``role_id``."""
    found: list[dict[str, Any]] = []
    for policy in synthesized.resources("AWS::IAM::Policy").values():
        if ref(role_id) in policy["Properties"].get("Roles", []):
            found += policy["Properties"]["PolicyDocument"]["Statement"]
    return found

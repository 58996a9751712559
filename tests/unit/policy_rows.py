"""What the evaluator's table tests share: the IAM documentation's pages, statement builders and a row's shape."""

from __future__ import annotations

from typing import Any, NamedTuple

from spotrun.local.iam.policy.evaluate import allowed

GUIDE = "https://docs.aws.amazon.com/IAM/latest/UserGuide/"
OPERATORS = GUIDE + "reference_policies_elements_condition_operators.html"
LOGIC = GUIDE + "reference_policies_condition-logic-multiple-context-keys-or-values.html"
VARIABLES = GUIDE + "reference_policies_variables.html"
RESOURCE = GUIDE + "reference_policies_elements_resource.html"
ACTION = GUIDE + "reference_policies_elements_action.html"
EVALUATION = GUIDE + "reference_policies_evaluation-logic.html"
NOT_ACTION = GUIDE + "reference_policies_elements_notaction.html"
NOT_RESOURCE = GUIDE + "reference_policies_elements_notresource.html"
USERS = "arn:aws:iam::111122223333:user/"


def allow(action: Any, resource: Any = "*", condition: dict[str, Any] | None = None) -> dict[str, Any]:
    """An Allow statement of ``action`` on ``resource``, with ``condition`` when given."""
    statement = {"Effect": "Allow", "Action": action, "Resource": resource}
    return statement | ({"Condition": condition} if condition else {})


def deny(action: Any, resource: Any = "*", condition: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Deny statement of the same elements."""
    return allow(action, resource, condition) | {"Effect": "Deny"}


class Row(NamedTuple):
    """One example of the IAM documentation: the page it is from, the policy, the request, IAM's answer."""

    doc: str
    statements: list[dict[str, Any]]
    action: str
    resource: str
    context: dict[str, Any]
    expected: bool


def judged(row: Row) -> bool:
    """The evaluator's answer to the row's request."""
    return allowed(row.statements, row.action, row.resource, row.context)

"""IAM's condition operators, each against the request context.

Reference: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_condition_operators.html
and, for several values and set operators,
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-logic-multiple-context-keys-or-values.html
and https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html

- A key absent from the request fails every operator, except that a negated one (``StringNotEquals``,
  ``ArnNotLike``, ``NotIpAddress``...) holds, ``...IfExists`` holds, ``ForAllValues:`` holds and
  ``ForAnyValue:`` fails; ``Null`` tests the absence itself.
- Several policy values of one key are ORed; for a negated operator they are NORed (no value may match).
- ``ForAllValues:`` holds when every request value passes; ``ForAnyValue:`` when one does; an empty set of
  request values counts as absent.
- Policy variables fill String, ARN and Bool values (reference_policies_variables.html#policy-vars-conditionelement).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import operator as op
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from spotrun.local.iam.policy.patterns import Mode, Wild, compiled, parts, scalar_text


class UnknownOperator(ValueError):
    """A condition operator IAM does not define: IAM refuses such a policy (``MalformedPolicyDocument``), so
    the evaluator raises rather than guess either way."""


# (request value, policy value: text, or parts for the operators that take variables) -> match
Compare = Callable[[Any, Any], bool]


def _number(value: Any) -> Decimal | None:
    try:
        return Decimal(scalar_text(value).strip())
    except InvalidOperation:
        return None


def _instant(value: Any) -> datetime | None:
    # Dates are W3C ISO 8601 or epoch seconds (#Conditions_Date).
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    text = scalar_text(value).strip()
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _ordered(kind: Callable[[Any], Any], relation: Callable[[Any, Any], bool]) -> Compare:
    def compare(actual: Any, wanted: Any) -> bool:
        left, right = kind(actual), kind(wanted)
        return left is not None and right is not None and relation(left, right)

    return compare


def _in_network(actual: Any, wanted: str) -> bool:
    # A policy address without a prefix is a /32 (#Conditions_IPAddress).
    try:
        return ipaddress.ip_address(scalar_text(actual).strip()) in ipaddress.ip_network(wanted, strict=False)
    except ValueError:
        return False


def _binary_equal(actual: Any, wanted: str) -> bool:
    try:
        expected = base64.b64decode(wanted, validate=True)
        got = actual if isinstance(actual, bytes) else base64.b64decode(scalar_text(actual), validate=True)
    except (binascii.Error, ValueError):
        return False
    return got == expected


def _pattern(mode: Mode, ignore_case: bool = False) -> Compare:
    # ``wanted`` arrives cut into parts by :func:`holds`, its variables filled.
    def compare(actual: Any, wanted: Any) -> bool:
        return compiled(wanted, mode, ignore_case).fullmatch(scalar_text(actual)) is not None

    return compare


def _bool(actual: Any, wanted: Any) -> bool:
    written = "".join(part.value if isinstance(part, Wild) else part[1] for part in wanted)
    return scalar_text(actual).lower() == written.lower()


# base operator -> (comparison, negated, takes policy variables)
_OPERATORS: dict[str, tuple[Compare, bool, bool]] = {
    "StringEquals": (_pattern(Mode.EXACT), False, True),
    "StringNotEquals": (_pattern(Mode.EXACT), True, True),
    "StringEqualsIgnoreCase": (_pattern(Mode.EXACT, ignore_case=True), False, True),
    "StringNotEqualsIgnoreCase": (_pattern(Mode.EXACT, ignore_case=True), True, True),
    "StringLike": (_pattern(Mode.TEXT), False, True),
    "StringNotLike": (_pattern(Mode.TEXT), True, True),
    # "The ArnEquals and ArnLike condition operators behave identically" (#Conditions_ARN).
    "ArnEquals": (_pattern(Mode.ARN), False, True),
    "ArnLike": (_pattern(Mode.ARN), False, True),
    "ArnNotEquals": (_pattern(Mode.ARN), True, True),
    "ArnNotLike": (_pattern(Mode.ARN), True, True),
    "NumericEquals": (_ordered(_number, op.eq), False, False),
    "NumericNotEquals": (_ordered(_number, op.eq), True, False),
    "NumericLessThan": (_ordered(_number, op.lt), False, False),
    "NumericLessThanEquals": (_ordered(_number, op.le), False, False),
    "NumericGreaterThan": (_ordered(_number, op.gt), False, False),
    "NumericGreaterThanEquals": (_ordered(_number, op.ge), False, False),
    "DateEquals": (_ordered(_instant, op.eq), False, False),
    "DateNotEquals": (_ordered(_instant, op.eq), True, False),
    "DateLessThan": (_ordered(_instant, op.lt), False, False),
    "DateLessThanEquals": (_ordered(_instant, op.le), False, False),
    "DateGreaterThan": (_ordered(_instant, op.gt), False, False),
    "DateGreaterThanEquals": (_ordered(_instant, op.ge), False, False),
    "Bool": (_bool, False, True),
    "BinaryEquals": (_binary_equal, False, False),
    "IpAddress": (_in_network, False, False),
    "NotIpAddress": (_in_network, True, False),
}
_QUALIFIERS = ("ForAllValues:", "ForAnyValue:")


def _split(name: str) -> tuple[str | None, str, bool]:
    qualifier = next((q for q in _QUALIFIERS if name.startswith(q)), None)
    base = name[len(qualifier) :] if qualifier else name
    if_exists = base.endswith("IfExists") and base != "IfExists"
    base = base[: -len("IfExists")] if if_exists else base
    if base == "Null" and not if_exists:
        return qualifier, base, False
    if base not in _OPERATORS:
        raise UnknownOperator(f"condition operator {name!r} is not one of IAM's")
    return qualifier, base, if_exists


def _request_values(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple | set | frozenset) else [value]


def holds(name: str, key: str, expected: Any, context: Mapping[str, Any], text: Callable[[Any], str]) -> bool:
    """Whether the condition ``name: {key: expected}`` holds for ``context`` (keys in lower case).

    ``text`` turns one policy value into its string (the evaluator's ``normalize``).

    Raises
    ------
    UnknownOperator
        ``name`` is no IAM condition operator.
    spotrun.local.iam.policy.patterns.Unresolved
        A policy variable in ``expected`` has no value in ``context``.
    """
    qualifier, base, if_exists = _split(name)
    wanted = [text(value) for value in _request_values(expected)]
    present = _request_values(context.get(key.lower()))
    if base == "Null":
        # "true": the key is absent (or empty); "false": it is there (#Conditions_Null).
        empty = not any(scalar_text(value) for value in present)
        return any(empty == (value.lower() == "true") for value in wanted)
    compare, negated, takes_variables = _OPERATORS[base]
    policy: list[Any] = wanted
    if takes_variables:
        policy = [parts(value, context) for value in wanted]
    if not present:
        if if_exists or qualifier == "ForAllValues:":
            return True
        return negated and qualifier is None

    def passes(actual: Any) -> bool:
        found = any(compare(actual, value) for value in policy)
        return not found if negated else found

    if qualifier == "ForAnyValue:":
        return any(passes(actual) for actual in present)
    if qualifier == "ForAllValues:" or negated:
        return all(passes(actual) for actual in present)
    return any(passes(actual) for actual in present)

"""The emulator's IAM evaluator against the IAM documentation's examples of multivalued context keys.

``ForAllValues:`` and ``ForAnyValue:`` set operators, each row one request against one example policy, with the
page and section it comes from and the answer the page gives.
"""

from __future__ import annotations

import pytest

from tests.unit.policy_rows import GUIDE, Row, allow, deny, judged

MULTI = GUIDE + "reference_policies_condition-single-vs-multi-valued-context-keys.html"
MULTI_EXAMPLES = GUIDE + "reference_policies_condition_examples-multi-valued-context-keys.html"


# From MULTI: DynamoDB attributes of the page's Thread table.
THREAD = "arn:aws:dynamodb:us-east-1:111122223333:table/Thread"
ATTRIBUTES = "dynamodb:requestedAttributes"
READABLE = [
    allow(
        "dynamodb:GetItem",
        THREAD,
        {"ForAllValues:StringLike": {ATTRIBUTES: ["PostDateTime", "Message", "Tags"]}},
    )
]
GUARDED = [
    allow("dynamodb:PutItem", THREAD),
    deny("dynamodb:PutItem", THREAD, {"ForAnyValue:StringLike": {ATTRIBUTES: ["ID", "PostDateTime"]}}),
]
# From MULTI_EXAMPLES, "Deny a single policy condition value for a multivalued context key" (DenyRestrictedTags),
# with an Allow for the tagging actions, as the page asks.
RESTRICTED = [
    allow(["iam:Tag*", "iam:UnTag*"]),
    deny(["iam:Tag*", "iam:UnTag*"], "*", {"ForAllValues:StringNotLike": {"aws:TagKeys": "key1*"}}),
]
TAG_ROLE = "arn:aws:iam::111122223333:role/r"

ROWS = {
    "for-all-subset": Row(
        MULTI + "#reference_policies_condition-forallvalues",
        READABLE,
        "dynamodb:GetItem",
        THREAD,
        {"dynamodb:requestedAttributes": ["PostDateTime", "Message"]},
        True,
    ),
    "for-all-extra": Row(
        MULTI + "#reference_policies_condition-forallvalues (UserName: no match)",
        READABLE,
        "dynamodb:GetItem",
        THREAD,
        {"dynamodb:requestedAttributes": ["PostDateTime", "UserName"]},
        False,
    ),
    "for-all-absent": Row(
        MULTI_EXAMPLES + " (ForAllValues also returns true if there are no context keys)",
        READABLE,
        "dynamodb:GetItem",
        THREAD,
        {},
        True,
    ),
    "for-any-denied": Row(
        MULTI + "#reference_policies_condition-foranyvalue",
        GUARDED,
        "dynamodb:PutItem",
        THREAD,
        {"dynamodb:requestedAttributes": ["UserName", "Message", "PostDateTime"]},
        False,
    ),
    "for-any-none": Row(
        MULTI + "#reference_policies_condition-foranyvalue (just UserName: not denied)",
        GUARDED,
        "dynamodb:PutItem",
        THREAD,
        {"dynamodb:requestedAttributes": ["UserName"]},
        True,
    ),
    "for-any-absent": Row(
        MULTI + " (empty data set: ForAnyValue returns false)", GUARDED, "dynamodb:PutItem", THREAD, {}, True
    ),
    "deny-restricted-key1": Row(
        MULTI_EXAMPLES
        + "#reference_policies_condition_examples-multi-valued-context-keys-1 (key1:legal: no match)",
        RESTRICTED,
        "iam:TagRole",
        TAG_ROLE,
        {"aws:TagKeys": ["key1:legal"]},
        True,
    ),
    "deny-restricted-all-key1": Row(
        MULTI_EXAMPLES
        + "#reference_policies_condition_examples-multi-valued-context-keys-1 (key1:hr, key1:personnel)",
        RESTRICTED,
        "iam:TagRole",
        TAG_ROLE,
        {"aws:TagKeys": ["key1:hr", "key1:personnel"]},
        True,
    ),
    "deny-restricted-key2": Row(
        MULTI_EXAMPLES
        + "#reference_policies_condition_examples-multi-valued-context-keys-1 (key2:audit: match)",
        RESTRICTED,
        "iam:TagRole",
        TAG_ROLE,
        {"aws:TagKeys": ["key2:audit"]},
        False,
    ),
    "deny-restricted-no-tags": Row(
        MULTI_EXAMPLES
        + "#reference_policies_condition_examples-multi-valued-context-keys-1 (no aws:TagKeys: match)",
        RESTRICTED,
        "iam:TagRole",
        TAG_ROLE,
        {},
        False,
    ),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_the_documented_answer(row: Row):
    # Given a policy with a set operator and a request, from the IAM documentation (row.doc)
    # When the evaluator judges the request
    verdict = judged(row)

    # Then it answers as the documentation says
    assert verdict is row.expected, row.doc

"""The emulator's IAM evaluator against the IAM documentation's examples of actions, resources, variables and
evaluation.

Each row is one request against one example policy of the IAM User Guide, with the page and section it comes
from; the expected answer is the one the page states, or the one that follows from the rule it states for that
request. Condition operators: tests/unit/test_policy_eval_conditions.py.
"""

from __future__ import annotations

import pytest

from spotrun.local.iam.policy.evaluate import Decision, allowed_by_all, decide, like
from tests.unit.policy_rows import (
    ACTION,
    EVALUATION,
    NOT_ACTION,
    NOT_RESOURCE,
    OPERATORS,
    RESOURCE,
    USERS,
    VARIABLES,
    Row,
    allow,
    deny,
    judged,
)

# From OPERATORS, String section: an S3 "home directory" per user, through ${aws:username}.
HOME = [
    allow(
        "s3:ListBucket",
        "arn:aws:s3:::BUCKET-NAME",
        {"StringLike": {"s3:prefix": ["", "home/", "home/${aws:username}/"]}},
    ),
    allow(
        "s3:*",
        ["arn:aws:s3:::BUCKET-NAME/home/${aws:username}", "arn:aws:s3:::BUCKET-NAME/home/${aws:username}/*"],
    ),
]
# From NOT_RESOURCE: deny everything of S3 outside the payroll folder.
PAYROLL = [
    allow("s3:*"),
    {
        "Effect": "Deny",
        "Action": "s3:*",
        "NotResource": ["arn:aws:s3:::HRBucket/Payroll", "arn:aws:s3:::HRBucket/Payroll/*"],
    },
]
ALL_BUT_IAM = [{"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}]

ROWS = {
    "action-case": Row(
        ACTION + " (prefix and action name are case insensitive)",
        [allow("iam:ListAccessKeys")],
        "IAM:listaccesskeys",
        "*",
        {},
        True,
    ),
    "action-wildcard": Row(
        ACTION + " (iam:*AccessKey*)", [allow("iam:*AccessKey*")], "iam:UpdateAccessKey", "*", {}, True
    ),
    "string-like-variable": Row(
        OPERATORS + "#Conditions_String (home directory)",
        HOME,
        "s3:ListBucket",
        "arn:aws:s3:::BUCKET-NAME",
        {"s3:prefix": "home/David/", "aws:username": "David"},
        True,
    ),
    "string-like-other-user": Row(
        OPERATORS + "#Conditions_String (home directory)",
        HOME,
        "s3:ListBucket",
        "arn:aws:s3:::BUCKET-NAME",
        {"s3:prefix": "home/Adele/", "aws:username": "David"},
        False,
    ),
    "resource-variable": Row(
        OPERATORS + "#Conditions_String (home directory)",
        HOME,
        "s3:GetObject",
        "arn:aws:s3:::BUCKET-NAME/home/David/notes.txt",
        {"aws:username": "David"},
        True,
    ),
    "resource-variable-other": Row(
        OPERATORS + "#Conditions_String (home directory)",
        HOME,
        "s3:GetObject",
        "arn:aws:s3:::BUCKET-NAME/home/Adele/notes.txt",
        {"aws:username": "David"},
        False,
    ),
    "variable-username": Row(
        VARIABLES + "#policy-vars-using-variables",
        [allow("iam:*AccessKey*", USERS + "${aws:username}")],
        "iam:CreateAccessKey",
        USERS + "David",
        {"aws:username": "David"},
        True,
    ),
    "variable-other-user": Row(
        VARIABLES + "#policy-vars-using-variables",
        [allow("iam:*AccessKey*", USERS + "${aws:username}")],
        "iam:CreateAccessKey",
        USERS + "Adele",
        {"aws:username": "David"},
        False,
    ),
    "variable-absent": Row(
        VARIABLES + "#principaltable (not present: the statement is invalid)",
        [allow("iam:*AccessKey*", [USERS + "*", USERS + "${aws:username}"])],
        "iam:CreateAccessKey",
        USERS + "David",
        {},
        False,
    ),
    "variable-tag": Row(
        VARIABLES + "#policy-vars-resourceelement",
        [allow("s3:*", "arn:aws:s3:::bucket/${aws:PrincipalTag/department}")],
        "s3:GetObject",
        "arn:aws:s3:::bucket/hr",
        {"aws:PrincipalTag/department": "hr"},
        True,
    ),
    "variable-default": Row(
        VARIABLES + "#policy-vars-default-values",
        [allow("s3:GetObject", "arn:aws:s3:::bucket/${aws:userid, 'anonymous'}/*")],
        "s3:GetObject",
        "arn:aws:s3:::bucket/anonymous/k",
        {},
        True,
    ),
    "variable-special": Row(
        VARIABLES + "#policy-vars-specialchars",
        [allow("s3:GetObject", "arn:aws:s3:::bucket/a${*}b${?}c${$}d")],
        "s3:GetObject",
        "arn:aws:s3:::bucket/a*b?c$d",
        {},
        True,
    ),
    "variable-special-literal": Row(
        VARIABLES + "#policy-vars-specialchars (not a wildcard)",
        [allow("s3:GetObject", "arn:aws:s3:::bucket/a${*}b")],
        "s3:GetObject",
        "arn:aws:s3:::bucket/aXb",
        {},
        False,
    ),
    "resource-slashes": Row(
        RESOURCE + "#reference_policies_elements_resource_wildcards",
        [allow("s3:GetObject", "arn:aws:s3:::amzn-s3-demo-bucket/*/test/*")],
        "s3:GetObject",
        "arn:aws:s3:::amzn-s3-demo-bucket/1///test///object.jpg",
        {},
        True,
    ),
    "resource-no-test-dir": Row(
        RESOURCE + "#reference_policies_elements_resource_wildcards (would not match)",
        [allow("s3:GetObject", "arn:aws:s3:::amzn-s3-demo-bucket/*/test/*")],
        "s3:GetObject",
        "arn:aws:s3:::amzn-s3-demo-bucket/1-test/object.jpg",
        {},
        False,
    ),
    "resource-case": Row(
        RESOURCE + " (the IAM user name is case sensitive)",
        [allow("iam:GetUser", USERS + "Bob")],
        "iam:GetUser",
        USERS + "bob",
        {},
        False,
    ),
    "resource-trailing-star": Row(
        RESOURCE + "#reference_policies_elements_resource_wildcards (a segment's last * may cross colons)",
        [allow("logs:*", "arn:aws:logs:us-east-1:*")],
        "logs:GetLogEvents",
        "arn:aws:logs:us-east-1:111122223333:log-group:g:log-stream:s",
        {},
        True,
    ),
    "resource-inner-star": Row(
        RESOURCE + "#reference_policies_elements_resource_wildcards (wildcards within a segment)",
        [allow("ec2:*", "arn:aws:ec2:us-*-1:111122223333:instance/*")],
        "ec2:StartInstances",
        "arn:aws:ec2:us-x:9:y-1:111122223333:instance/i-1",
        {},
        False,
    ),
    "not-action-other": Row(
        NOT_ACTION + " (all but IAM)",
        ALL_BUT_IAM,
        "s3:ListBucket",
        "arn:aws:s3:::b",
        {},
        True,
    ),
    "not-action-iam": Row(
        NOT_ACTION + " (all but IAM)",
        ALL_BUT_IAM,
        "iam:CreateUser",
        USERS + "x",
        {},
        False,
    ),
    "not-resource-outside": Row(
        NOT_RESOURCE + " (deny all but the bucket)",
        PAYROLL,
        "s3:GetObject",
        "arn:aws:s3:::Other/k",
        {},
        False,
    ),
    "not-resource-inside": Row(
        NOT_RESOURCE + " (deny all but the bucket)",
        PAYROLL,
        "s3:GetObject",
        "arn:aws:s3:::HRBucket/Payroll/may.csv",
        {},
        True,
    ),
    "explicit-deny-wins": Row(
        EVALUATION + "#policy-eval-denyallow (an explicit deny overrides an allow)",
        [allow("s3:*"), deny("s3:DeleteObject")],
        "s3:DeleteObject",
        "arn:aws:s3:::b/k",
        {},
        False,
    ),
    "implicit-deny": Row(
        EVALUATION + "#policy-eval-denyallow (no allow: implicitly denied)",
        [allow("s3:GetObject")],
        "s3:PutObject",
        "arn:aws:s3:::b/k",
        {},
        False,
    ),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_the_documented_answer(row: Row):
    # Given a policy and a request from the IAM documentation (row.doc)
    # When the evaluator judges the request
    verdict = judged(row)

    # Then it answers as the documentation says
    assert verdict is row.expected, row.doc


def test_a_session_gets_the_intersection_of_role_and_session_policy():
    # Given a role that allows all of S3 and a session policy that allows reading only
    # (https://docs.aws.amazon.com/IAM/latest/UserGuide/access_policies.html#policies_session)
    role, session = [allow("s3:*")], [allow("s3:GetObject")]

    # When the session reads and writes, Then only what both allow is allowed
    assert allowed_by_all([role, session], "s3:GetObject", "arn:aws:s3:::b/k")
    assert not allowed_by_all([role, session], "s3:PutObject", "arn:aws:s3:::b/k")


def test_the_decision_names_an_explicit_deny():
    # Given an Allow and a Deny for the same action (EVALUATION#policy-eval-denyallow)
    statements = [allow("s3:*"), deny("s3:DeleteObject")]

    # When the three kinds of request are judged, Then each decision says which rule decided
    assert decide(statements, "s3:DeleteObject", "arn:aws:s3:::b/k") is Decision.EXPLICIT_DENY
    assert decide(statements, "s3:GetObject", "arn:aws:s3:::b/k") is Decision.ALLOW
    assert decide(statements, "ec2:RunInstances", "*") is Decision.IMPLICIT_DENY


def test_like_keeps_the_wildcard_forms():
    # Given IAM string patterns (VARIABLES#policy-vars-specialchars), Then * and ? are wildcards and the
    # ${...} forms the characters, and a variable is filled from the context it is given
    assert like("a*c", "abbbc")
    assert like("a?c", "abc")
    assert not like("a?c", "abbc")
    assert like("x/${$}{y}", "x/${y}")
    assert like("home/${aws:username}/*", "home/bob/k", {"aws:username": "bob"})
    assert not like("home/${aws:username}/*", "home/bob/k")

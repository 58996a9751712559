"""The emulator's IAM evaluator against the condition examples of the IAM documentation.

Each row is one request against one example policy of the IAM User Guide, with the page and section it comes
from; the expected answer is the one the page states, or the one that follows from the rule it states for that
request. Set operators: tests/unit/test_policy_eval_sets.py; other elements: tests/unit/test_policy_eval.py.
"""

from __future__ import annotations

import pytest

from spotrun.local.iam.policy.evaluate import UnknownOperator, allowed
from tests.unit.policy_rows import LOGIC, OPERATORS, USERS, VARIABLES, Row, allow, deny, judged

# From OPERATORS, String section: the principal must carry the tag job-category = iamuser-admin.
TAGGED = [
    allow(
        "iam:*AccessKey*", USERS + "*", {"StringEquals": {"aws:PrincipalTag/job-category": "iamuser-admin"}}
    )
]
# From OPERATORS, IfExists section: the instance type is checked only where the resource has one.
IF_EXISTS = [
    allow("ec2:RunInstances", "*", {"StringLikeIfExists": {"ec2:InstanceType": ["t1.*", "t2.*", "m3.*"]}})
]
DOES_NOT_WORK = [
    allow("ec2:RunInstances", "*", {"StringLike": {"ec2:InstanceType": ["t1.*", "t2.*", "m3.*"]}})
]
# From OPERATORS, Boolean section: deny S3 over plain HTTP (with an Allow for the rest, as the page asks).
SECURE = [
    allow("s3:*"),
    deny(
        "s3:*",
        ["arn:aws:s3:::DOC-EXAMPLE-BUCKET", "arn:aws:s3:::DOC-EXAMPLE-BUCKET/*"],
        {"Bool": {"aws:SecureTransport": "false"}},
    ),
]
# From OPERATORS, ARN section: the page's pattern, and the value it says StringLike matches and ArnLike does not.
ARN_PATTERN = "arn:aws:someservice:*:111122223333:finance/*"
ARN_VALUE = "arn:aws:someservice:us-east-2:999999999999:store/abc:111122223333:finance/document.txt"
# From LOGIC, negated matching: a negated operator NORs its values.
NOT_TEAMS = [
    allow("s3:GetObject", "*", {"StringNotEquals": {"aws:PrincipalTag/team": ["audit", "security"]}})
]

ROWS = {
    "key-name-case": Row(
        VARIABLES + "#policy-vars-infoallreqs (key names are case-insensitive)",
        [allow("ec2:*", "*", {"DateGreaterThan": {"AWS:currenttime": "2020-01-01T00:00:01Z"}})],
        "ec2:DescribeInstances",
        "*",
        {"aws:CurrentTime": "2024-05-01T12:00:00Z"},
        True,
    ),
    "string-equals": Row(
        OPERATORS + "#Conditions_String",
        TAGGED,
        "iam:CreateAccessKey",
        USERS + "bob",
        {"aws:PrincipalTag/job-category": "iamuser-admin"},
        True,
    ),
    "string-equals-untagged": Row(
        OPERATORS + "#Conditions_String (a user without the tag: false)",
        TAGGED,
        "iam:CreateAccessKey",
        USERS + "bob",
        {},
        False,
    ),
    "string-equals-case": Row(
        OPERATORS + "#Conditions_String (StringEquals: case sensitive)",
        TAGGED,
        "iam:CreateAccessKey",
        USERS + "bob",
        {"aws:PrincipalTag/job-category": "IAMUSER-ADMIN"},
        False,
    ),
    "string-ignore-case": Row(
        OPERATORS + "#Conditions_String (StringEqualsIgnoreCase)",
        [
            allow(
                "iam:*AccessKey*",
                USERS + "*",
                {"StringEqualsIgnoreCase": {"aws:PrincipalTag/job-category": "iamuser-admin"}},
            )
        ],
        "iam:CreateAccessKey",
        USERS + "bob",
        {"aws:PrincipalTag/job-category": "IAMUser-Admin"},
        True,
    ),
    "string-equals-no-wildcard": Row(
        OPERATORS + "#Conditions_String (wildcards only with StringLike)",
        [allow("s3:ListBucket", "*", {"StringEquals": {"s3:prefix": "home/*"}})],
        "s3:ListBucket",
        "arn:aws:s3:::b",
        {"s3:prefix": "home/x"},
        False,
    ),
    "negated-absent": Row(
        OPERATORS + " (Important: StringNotLike, key not present: true)",
        [allow("s3:GetObject", "*", {"StringNotLike": {"aws:PrincipalTag/team": "temp-*"}})],
        "s3:GetObject",
        "arn:aws:s3:::b/k",
        {},
        True,
    ),
    "arn-not-like-absent": Row(
        OPERATORS + " (Important: ArnNotLike, key not present: true)",
        [allow("sqs:SendMessage", "*", {"ArnNotLike": {"aws:SourceArn": "arn:aws:sns:*:111122223333:*"}})],
        "sqs:SendMessage",
        "arn:aws:sqs:us-east-2:111122223333:q",
        {},
        True,
    ),
    "negated-nor-match": Row(
        LOGIC + "#reference_policies_multiple-conditions-negated-matching-eval",
        NOT_TEAMS,
        "s3:GetObject",
        "arn:aws:s3:::b/k",
        {"aws:PrincipalTag/team": "audit"},
        False,
    ),
    "negated-nor-other": Row(
        LOGIC + "#reference_policies_multiple-conditions-negated-matching-eval",
        NOT_TEAMS,
        "s3:GetObject",
        "arn:aws:s3:::b/k",
        {"aws:PrincipalTag/team": "dev"},
        True,
    ),
    "if-exists-absent": Row(
        OPERATORS + "#Conditions_IfExists (an image has no ec2:InstanceType)",
        IF_EXISTS,
        "ec2:RunInstances",
        "arn:aws:ec2:us-east-1::image/ami-1",
        {},
        True,
    ),
    "if-exists-present": Row(
        OPERATORS + "#Conditions_IfExists",
        IF_EXISTS,
        "ec2:RunInstances",
        "arn:aws:ec2:us-east-1:111122223333:instance/*",
        {"ec2:InstanceType": "p4d.24xlarge"},
        False,
    ),
    "if-exists-matches": Row(
        OPERATORS + "#Conditions_IfExists",
        IF_EXISTS,
        "ec2:RunInstances",
        "arn:aws:ec2:us-east-1:111122223333:instance/*",
        {"ec2:InstanceType": "t2.micro"},
        True,
    ),
    "without-if-exists": Row(
        OPERATORS + "#Conditions_IfExists (THISPOLICYDOESNOTWORK)",
        DOES_NOT_WORK,
        "ec2:RunInstances",
        "arn:aws:ec2:us-east-1::image/ami-1",
        {},
        False,
    ),
    "null-true": Row(
        OPERATORS + "#Conditions_Null (no temporary credentials)",
        [allow("ec2:*", "*", {"Null": {"aws:TokenIssueTime": "true"}})],
        "ec2:DescribeInstances",
        "*",
        {},
        True,
    ),
    "null-with-token": Row(
        OPERATORS + "#Conditions_Null (no temporary credentials)",
        [allow("ec2:*", "*", {"Null": {"aws:TokenIssueTime": "true"}})],
        "ec2:DescribeInstances",
        "*",
        {"aws:TokenIssueTime": "2024-01-01T00:00:00Z"},
        False,
    ),
    "numeric-up-to-10": Row(
        OPERATORS + "#Conditions_Numeric",
        [
            allow(
                "s3:ListBucket",
                "arn:aws:s3:::example_bucket",
                {"NumericLessThanEquals": {"s3:max-keys": "10"}},
            )
        ],
        "s3:ListBucket",
        "arn:aws:s3:::example_bucket",
        {"s3:max-keys": "10"},
        True,
    ),
    "numeric-over-10": Row(
        OPERATORS + "#Conditions_Numeric",
        [
            allow(
                "s3:ListBucket",
                "arn:aws:s3:::example_bucket",
                {"NumericLessThanEquals": {"s3:max-keys": "10"}},
            )
        ],
        "s3:ListBucket",
        "arn:aws:s3:::example_bucket",
        {"s3:max-keys": "11"},
        False,
    ),
    "numeric-not-equals-absent": Row(
        OPERATORS + " (Important: a negated operator, key not present: true)",
        [allow("s3:ListBucket", "*", {"NumericNotEquals": {"s3:max-keys": "10"}})],
        "s3:ListBucket",
        "arn:aws:s3:::b",
        {},
        True,
    ),
    "date-issued-after": Row(
        OPERATORS + "#Conditions_Date",
        [
            allow(
                "iam:*AccessKey*",
                USERS + "*",
                {"DateGreaterThan": {"aws:TokenIssueTime": "2020-01-01T00:00:01Z"}},
            )
        ],
        "iam:ListAccessKeys",
        USERS + "bob",
        {"aws:TokenIssueTime": "2020-06-01T00:00:00Z"},
        True,
    ),
    "date-iam-user": Row(
        OPERATORS + "#Conditions_Date (an IAM user has no aws:TokenIssueTime: denied)",
        [
            allow(
                "iam:*AccessKey*",
                USERS + "*",
                {"DateGreaterThan": {"aws:TokenIssueTime": "2020-01-01T00:00:01Z"}},
            )
        ],
        "iam:ListAccessKeys",
        USERS + "bob",
        {},
        False,
    ),
    "bool-plain-http": Row(
        OPERATORS + "#Conditions_Boolean",
        SECURE,
        "s3:GetObject",
        "arn:aws:s3:::DOC-EXAMPLE-BUCKET/k",
        {"aws:SecureTransport": False},
        False,
    ),
    "bool-tls": Row(
        OPERATORS + "#Conditions_Boolean",
        SECURE,
        "s3:GetObject",
        "arn:aws:s3:::DOC-EXAMPLE-BUCKET/k",
        {"aws:SecureTransport": True},
        True,
    ),
    "ip-in-range": Row(
        OPERATORS + "#Conditions_IPAddress",
        [allow("iam:*AccessKey*", USERS + "*", {"IpAddress": {"aws:SourceIp": "203.0.113.0/24"}})],
        "iam:ListAccessKeys",
        USERS + "bob",
        {"aws:SourceIp": "203.0.113.77"},
        True,
    ),
    "ip-out-of-range": Row(
        OPERATORS + "#Conditions_IPAddress",
        [allow("iam:*AccessKey*", USERS + "*", {"IpAddress": {"aws:SourceIp": "203.0.113.0/24"}})],
        "iam:ListAccessKeys",
        USERS + "bob",
        {"aws:SourceIp": "198.51.100.7"},
        False,
    ),
    "ip-v6": Row(
        OPERATORS + "#Conditions_IPAddress (IPv4 and IPv6 mixed)",
        [
            allow(
                "someservice:*",
                "*",
                {"IpAddress": {"aws:SourceIp": ["203.0.113.0/24", "2001:DB8:1234:5678::/64"]}},
            )
        ],
        "someservice:Act",
        "*",
        {"aws:SourceIp": "2001:db8:1234:5678::9"},
        True,
    ),
    "binary-equals": Row(
        OPERATORS + "#Conditions_BinaryEquals",
        [allow("svc:Act", "*", {"BinaryEquals": {"key": "QmluYXJ5VmFsdWVJbkJhc2U2NA=="}})],
        "svc:Act",
        "*",
        {"key": b"BinaryValueInBase64"},
        True,
    ),
    "arn-like-per-part": Row(
        OPERATORS + "#Conditions_ARN (ArnLike fails)",
        [allow("svc:Act", "*", {"ArnLike": {"aws:SourceArn": ARN_PATTERN}})],
        "svc:Act",
        "*",
        {"aws:SourceArn": ARN_VALUE},
        False,
    ),
    "string-like-spans": Row(
        OPERATORS + "#Conditions_ARN (StringLike succeeds)",
        [allow("svc:Act", "*", {"StringLike": {"aws:SourceArn": ARN_PATTERN}})],
        "svc:Act",
        "*",
        {"aws:SourceArn": ARN_VALUE},
        True,
    ),
    "arn-equals-wildcards": Row(
        OPERATORS + "#Conditions_ARN (ArnEquals and ArnLike behave identically)",
        [allow("svc:Act", "*", {"ArnEquals": {"aws:SourceArn": ARN_PATTERN}})],
        "svc:Act",
        "*",
        {"aws:SourceArn": "arn:aws:someservice:us-east-2:111122223333:finance/document.txt"},
        True,
    ),
    "arn-equals-exact": Row(
        OPERATORS + "#Conditions_ARN (SQS queue, SNS topic)",
        [
            allow(
                "SQS:SendMessage",
                "arn:aws:sqs:us-east-2:123456789012:QUEUE-ID",
                {"ArnEquals": {"aws:SourceArn": "arn:aws:sns:us-east-2:123456789012:TOPIC-ID"}},
            )
        ],
        "sqs:SendMessage",
        "arn:aws:sqs:us-east-2:123456789012:QUEUE-ID",
        {"aws:SourceArn": "arn:aws:sns:us-east-2:123456789012:OTHER"},
        False,
    ),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_the_documented_answer(row: Row):
    # Given a policy with a condition and a request, from the IAM documentation (row.doc)
    # When the evaluator judges the request
    verdict = judged(row)

    # Then it answers as the documentation says
    assert verdict is row.expected, row.doc


@pytest.mark.parametrize("effect", ["Allow", "Deny"])
def test_an_unknown_operator_is_refused_not_guessed(effect: str):
    # Given a statement with an operator IAM does not define (a typo of StringEquals)
    statement = allow("s3:*", "*", {"StringEqual": {"s3:prefix": "x"}}) | {"Effect": effect}

    # When it is evaluated, Then it raises: IAM refuses such a policy, and neither allow nor skip is safe
    with pytest.raises(UnknownOperator, match="StringEqual"):
        allowed([statement], "s3:ListBucket", "arn:aws:s3:::b", {"s3:prefix": "x"})


@pytest.mark.parametrize(
    ("positive", "negated", "policy", "request_values"),
    [
        ("StringEquals", "StringNotEquals", ["audit", "security"], ["dev", "audit"]),
        ("StringLike", "StringNotLike", ["temp-*"], ["core", "temp-1"]),
        ("IpAddress", "NotIpAddress", ["203.0.113.0/24"], ["198.51.100.7", "203.0.113.9"]),
    ],
)
def test_a_negated_operator_denies_what_its_positive_one_finds(positive, negated, policy, request_values):
    # Given a key holding two request values, one of which the policy names (LOGIC: a negated operator NORs
    # its values; with several request values and no set operator we keep negated = not positive)
    def judged_with(name: str) -> bool:
        statement = allow("svc:Act", "*", {name: {"aws:PrincipalTag/team": policy}})
        return allowed([statement], "svc:Act", "*", {"aws:PrincipalTag/team": request_values})

    # When both operators judge it, Then the negated one holds exactly when the positive one does not
    assert judged_with(positive)
    assert not judged_with(negated)

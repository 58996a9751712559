"""The resources the emulator's judge names for each action, as the Service Authorization Reference defines them,
and the signer it reads from a request."""

from __future__ import annotations

from typing import Any

import pytest

from spotrun.local.iam.identities import Signature
from spotrun.local.iam.resources import Request, resources, s3_copy_source

ACCOUNT = "123456789012"


def request(action: str, **params: Any) -> Request:
    return Request(action=action, region="us-east-1", param=params.get)


@pytest.mark.parametrize(
    ("action", "params", "expected"),
    [
        # DynamoDB: "GetItem: table*", "Scan: table*", "Query: index/table"
        ("dynamodb:Scan", {"TableName": "jobs"}, [f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/jobs"]),
        ("dynamodb:UpdateItem", {"TableName": "jobs"}, [f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/jobs"]),
        (
            "dynamodb:Query",
            {"TableName": "jobs", "IndexName": "by-status"},
            [f"arn:aws:dynamodb:us-east-1:{ACCOUNT}:table/jobs/index/by-status"],
        ),
        # Step Functions: SendTaskSuccess has no resource type
        ("states:SendTaskSuccess", {"taskToken": "t"}, ["*"]),
        # CloudWatch Logs: stream actions on log-stream, group actions on log-group
        (
            "logs:GetLogEvents",
            {"logGroupName": "/spotrun/b", "logStreamName": "j/attempt-001"},
            [f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:/spotrun/b:log-stream:j/attempt-001"],
        ),
        (
            "logs:DescribeLogStreams",
            {"logGroupName": "/spotrun/b"},
            [f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:/spotrun/b"],
        ),
        # Systems Manager: parameter actions on the parameter (a path's too); DescribeParameters on "*"
        (
            "ssm:GetParametersByPath",
            {"Path": "/spotrun"},
            [f"arn:aws:ssm:us-east-1:{ACCOUNT}:parameter/spotrun"],
        ),
        (
            "ssm:GetParameters",
            {"Names": ["/a", "b"]},
            [f"arn:aws:ssm:us-east-1:{ACCOUNT}:parameter/a", f"arn:aws:ssm:us-east-1:{ACCOUNT}:parameter/b"],
        ),
        ("ssm:DescribeParameters", {}, ["*"]),
        # EC2: DescribeInstances has no resource type
        ("ec2:DescribeInstances", {}, ["*"]),
    ],
)
def test_each_action_is_judged_on_the_references_resources(action, params, expected):
    # Given a request, When its resources are named, Then they are the Reference's
    assert resources(request(action, **params)) == expected


def test_a_copy_names_its_source_object():
    # Given copy-source headers as SDKs send them (encoded, with or without a leading slash and a version)
    # When the source is read, Then it is the source object's ARN
    assert s3_copy_source({"x-amz-copy-source": "/b/jobs/x%20y/k?versionId=1"}) == "arn:aws:s3:::b/jobs/x y/k"
    assert s3_copy_source({"x-amz-copy-source": "b/k"}) == "arn:aws:s3:::b/k"
    assert s3_copy_source({}) is None


@pytest.mark.parametrize(
    ("headers", "query", "expected"),
    [
        (
            {
                "Authorization": "AWS4-HMAC-SHA256 Credential=ASIAX/20261207/us-east-1/s3/aws4_request, Sig=..."
            },
            {},
            Signature("ASIAX", None),
        ),
        (
            {
                "Authorization": "AWS4-HMAC-SHA256 Credential=ASIAX/20261207/us-east-1/s3/aws4_request",
                "X-Amz-Security-Token": "tok",
            },
            {},
            Signature("ASIAX", "tok"),
        ),
        (
            {},
            {"X-Amz-Credential": ["ASIAY/20261207/us-east-1/s3/aws4_request"], "X-Amz-Security-Token": ["t"]},
            Signature("ASIAY", "t"),
        ),
        ({"Authorization": "AWS AKIAZ:c2ln"}, {}, Signature("AKIAZ", None)),
        ({}, {}, Signature(None, None)),
    ],
)
def test_the_signer_is_read_from_the_header_or_a_presigned_query(headers, query, expected):
    # Given a signed, a presigned, a SigV2 and an unsigned request, When the signer is read, Then it is named
    assert Signature.of(headers, query) == expected

"""cdk-nag acknowledgments: every exception to AwsSolutions is recorded with its reason, next to its cause."""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from constructs import IConstruct


def acknowledge(scope: IConstruct, rule_id: str, reason: str) -> None:
    """Accept one cdk-nag finding on ``scope`` and everything under it.

    Parameters
    ----------
    scope
        The construct whose resources raise the finding.
    rule_id
        The finding, e.g. ``AwsSolutions-IAM4[Policy::...]``.
    reason
        Why the finding is acceptable here; it is written into the template's metadata.
    """
    if not reason.strip():
        raise ValueError(f"an acknowledgment of {rule_id} needs a reason")
    Validations.of(scope).acknowledge(Acknowledgment(id=rule_id, reason=reason))


def flatten_reference(value: Any) -> str:
    """Render a resolved CloudFormation value the way cdk-nag names it in a finding.

    ``{"Fn::GetAtt": ["Bucket", "Arn"]}`` becomes ``<Bucket.Arn>``, ``{"Ref": "AWS::Region"}`` becomes
    ``<AWS::Region>`` and ``Fn::Join`` concatenates; this mirrors cdk-nag's ``flattenCfnReference`` so an
    acknowledgment can be computed from the same statement that causes the finding.
    """
    if isinstance(value, str):
        return value.replace("${", "<").replace("}", ">")
    if isinstance(value, dict):
        if "Fn::Join" in value:
            delimiter, items = value["Fn::Join"]
            return str(delimiter).join(flatten_reference(item) for item in items)
        if "Fn::Sub" in value:
            return flatten_reference(value["Fn::Sub"])
        if "Fn::GetAtt" in value:
            resource, attribute = value["Fn::GetAtt"]
            return f"<{flatten_reference(resource)}.{flatten_reference(attribute)}>"
        if "Ref" in value:
            return f"<{flatten_reference(value['Ref'])}>"
    raise TypeError(f"cannot name {value!r} as cdk-nag does")


def wildcard_resource_finding(scope: IConstruct, resource: str) -> str:
    """The ``AwsSolutions-IAM5`` finding id that a statement on ``resource`` (a string or token) raises."""
    return f"AwsSolutions-IAM5[Resource::{flatten_reference(Stack.of(scope).resolve(resource))}]"

"""Marks each resource built from the shape with the shape's name for it.

The mark is CloudFormation metadata (every resource type accepts it; not every type takes tags), so the
synthesized template says which declaration each function, rule, table and bucket came from. The drift test
compares those marks with what the emulator provisions.
"""

from __future__ import annotations

from aws_cdk import CfnResource
from constructs import IConstruct

METADATA_KEY = "spotrun:shape"


def mark(construct: IConstruct, kind: str, logical_name: str) -> None:
    """Record on ``construct``'s CloudFormation resource that it is the shape's ``kind`` ``logical_name``.

    Parameters
    ----------
    construct
        An L2 construct (its default child is marked) or an L1 resource.
    kind
        ``"function"``, ``"rule"``, ``"table"`` or ``"bucket"``.
    logical_name
        The name under which :data:`spotrun.shape.SHAPE` declares it.
    """
    resource = construct if isinstance(construct, CfnResource) else construct.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"{construct.node.path} has no CloudFormation resource to mark")
    resource.add_metadata(METADATA_KEY, {"kind": kind, "name": logical_name})

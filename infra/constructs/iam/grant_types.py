"""The vocabulary of :mod:`infra.constructs.iam.permissions`: the stack's ARNs, one IAM statement, an ARN builder."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aws_cdk import Aws


@dataclass(frozen=True)
class Targets:
    """ARNs the grants point at (tokens of the stack's resources)."""

    table_arns: Mapping[str, str]
    tables_with_indexes: frozenset[str]
    bucket_arns: Mapping[str, str]
    state_machine_arn: str
    state_machine_name: str
    agent_document_name: str
    launch_template_id: str
    instance_role_arn: str
    subnet_ids: tuple[str, ...] = ()  # the instances' subnets, which fleet requests name per override
    # The template of multi-node groups with an EFA, and the cluster placement groups (one per subnet, by name).
    efa_launch_template_id: str = ""
    placement_group_names: tuple[str, ...] = ()
    bus_arns: Mapping[str, str] = field(default_factory=dict)  # setting (event_bus_name) -> bus ARN
    schedule_group: str = ""
    scheduler_role_arn: str = ""
    # The deployer's extra archive buckets (option archive_buckets): name -> bucket ARN.
    archive_bucket_arns: Mapping[str, str] = field(default_factory=dict)
    # The role the API function assumes for an instance's job credentials (infra.constructs.iam.job_access).
    job_access_role_arn: str = ""
    # The deployer's buckets of inputs and code (option data_buckets): name -> bucket ARN.
    data_bucket_arns: Mapping[str, str] = field(default_factory=dict)
    # The deployment's log group of live training logs (its ARN without ":*"; spotrun.model.layout.log_group).
    training_logs_arn: str = ""


@dataclass(frozen=True)
class Grant:
    """One IAM statement and why the function needs it."""

    actions: tuple[str, ...]
    resources: tuple[str, ...]
    why: str
    conditions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def arn_of(service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
    """An ARN of ``service`` in the stack's partition (and region and account, unless told otherwise)."""
    return (
        f"arn:{Aws.PARTITION}:{service}:{Aws.REGION if region else ''}:{Aws.ACCOUNT_ID if account else ''}:"
        f"{resource}"
    )


INSTANCES = arn_of("ec2", "instance/*")
NO_RESOURCE_LEVEL = (
    "these EC2 read calls (Describe*) have no resource-level permissions in IAM, so they are granted on '*'"
)

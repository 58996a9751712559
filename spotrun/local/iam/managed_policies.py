"""AWS managed policies the deployment attaches, as AWS publishes them, put into moto's IAM.

moto loads no AWS managed policy by default (and its bundled copies carry no version); each document here is
written out from AWS's managed policy reference (its ``Source``), with its default version and dates, in
``aws_managed_policies/<name>.json``. :func:`install` adds them to moto's IAM backend so that
``AttachRolePolicy`` works on their ARNs and a role then holds them like any attached policy.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

DIRECTORY = Path(__file__).with_name("aws_managed_policies")
SSM_MANAGED_INSTANCE_CORE = "AmazonSSMManagedInstanceCore"


@cache
def load(name: str) -> dict[str, Any]:
    """The stored record of the AWS managed policy ``name`` (``Arn``, ``DefaultVersionId``, ``Document``, ...)."""
    record: dict[str, Any] = json.loads((DIRECTORY / f"{name}.json").read_text())
    return record


def names() -> list[str]:
    """Every AWS managed policy stored."""
    return sorted(path.stem for path in DIRECTORY.glob("*.json"))


def arn(name: str) -> str:
    """The ARN of the AWS managed policy ``name``."""
    return str(load(name)["Arn"])


def install(account_id: str) -> None:
    """Put every stored AWS managed policy into moto's IAM of ``account_id`` (idempotent)."""
    from moto.iam.models import AWSManagedPolicy, iam_backends

    backend = iam_backends[account_id]["aws"]
    for name in names():
        record = load(name)
        if record["Arn"] in backend.managed_policies:
            continue
        policy = AWSManagedPolicy.from_data(name, account_id, "us-east-1", record)
        backend.managed_policies[policy.arn] = policy

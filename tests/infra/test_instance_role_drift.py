"""The emulator's instance role holds what the deployed one does: its statements and AWS managed policies."""

from __future__ import annotations

import json
import re
from typing import Any

from spotrun.local.iam.roles import instance_role
from tests.infra.conftest import Synthesized
from tests.infra.test_storage_and_network import actions_of, statements_of

# Two statements of the deployed role act on nothing the emulator has (spotrun.local.iam.roles.instance_role):
# the agent package's CDK asset object, and the API's agent routes (the API stand-in authenticates its callers).
NOTHING_TO_ACT_ON = ({"s3:GetObject"}, {"execute-api:Invoke"})


class RecordingIam:
    """Records what provisioning gives the role, as moto's IAM would hold it."""

    def __init__(self) -> None:
        self.statements: list[dict[str, Any]] = []
        self.managed: list[str] = []

    def create_role(self, **_: Any) -> dict[str, Any]:
        return {"Role": {"Arn": "arn:aws:iam::123456789012:role/spotrun-local-instances"}}

    def attach_role_policy(self, *, RoleName: str, PolicyArn: str) -> None:  # noqa: N803 - boto3's names
        self.managed.append(PolicyArn)

    def put_role_policy(self, *, RoleName: str, PolicyName: str, PolicyDocument: str) -> None:  # noqa: N803
        self.statements += json.loads(PolicyDocument)["Statement"]


def shape(statement: dict[str, Any]) -> tuple[str, tuple[str, ...], str]:
    """A statement's effect, actions and conditions (resources differ: CloudFormation references locally)."""
    return statement["Effect"], tuple(sorted(actions_of(statement))), json.dumps(statement.get("Condition"))


def test_the_emulators_instance_role_holds_every_statement_and_managed_policy_of_the_deployed_one(
    synthesized: Synthesized,
) -> None:
    # Given the deployed instances' role (the one EC2 assumes), and the emulator's, as provisioning makes it
    roles = synthesized.resources("AWS::IAM::Role")
    (role_id,) = [
        key
        for key, role in roles.items()
        if role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]
        == {"Service": "ec2.amazonaws.com"}
    ]
    local = RecordingIam()
    instance_role(local, ())

    # Then every deployed statement is the emulator's too, but the two with nothing to act on locally
    held = {shape(statement) for statement in local.statements}
    for statement in statements_of(synthesized, role_id):
        if set(actions_of(statement)) in NOTHING_TO_ACT_ON:
            continue
        assert shape(statement) in held, statement
    # and the AWS managed policies are the same
    deployed = set(re.findall(r"policy/(\w+)", json.dumps(roles[role_id]["Properties"]["ManagedPolicyArns"])))
    assert {arn.rsplit("/", 1)[-1] for arn in local.managed} == deployed

"""acquire's launch permissions in the synthesized template: launches only from the launch template, as it is.

moto's IAM access control cannot judge these statements offline: it evaluates only ``StringEquals`` conditions
and supplies condition values only for role trust policies (``moto/iam/access_control.py``,
``_check_conditions``), and EC2 requests carry no ``ec2:LaunchTemplate``/``ec2:IsLaunchTemplateResource`` context
there. These tests therefore read the statements themselves.
"""

from __future__ import annotations

import json

from tests.infra.conftest import Synthesized
from tests.infra.test_storage_and_network import actions_of, statements_of


def _acquire(synthesized: Synthesized, action: str) -> list[dict]:
    function = synthesized.marked("function")["acquire"]
    role = synthesized.properties(function)["Role"]["Fn::GetAtt"][0]
    return [s for s in statements_of(synthesized, role) if action in actions_of(s)]


def _resources(statement: dict) -> list[str]:
    resource = statement["Resource"]
    return [json.dumps(r) for r in (resource if isinstance(resource, list) else [resource])]


def _template_id(synthesized: Synthesized) -> str:
    (template_id,) = synthesized.resources("AWS::EC2::LaunchTemplate")
    return template_id


def _names_template(value: object, template_id: str) -> bool:
    text = value if isinstance(value, str) else json.dumps(value)
    return f'"Ref": "{template_id}"' in text


def test_run_instances_only_from_this_template_and_its_resources_unchanged(synthesized: Synthesized) -> None:
    # Given acquire's RunInstances statements
    runs = _acquire(synthesized, "ec2:RunInstances")
    template_id = _template_id(synthesized)

    # Then every one is conditioned on this very launch template, and none is granted on '*'
    assert runs
    for run in runs:
        assert _names_template(run["Condition"]["ArnLike"]["ec2:LaunchTemplate"], template_id)
        assert '"*"' not in _resources(run)
    # ...the image, security group, volumes and instances only as the template names them (no override)
    (unchanged,) = [r for r in runs if "ec2:IsLaunchTemplateResource" in json.dumps(r["Condition"])]
    assert unchanged["Condition"]["Bool"] == {"ec2:IsLaunchTemplateResource": "true"}
    kinds = " ".join(_resources(unchanged))
    for kind in ("image/*", "security-group/*", "volume/*", "instance/*"):
        assert kind in kinds
    # ...what the template leaves to the request, only the deployment's own subnets (no subnet/*)
    (overridable,) = [r for r in runs if "subnet/" in " ".join(_resources(r))]
    resources = " ".join(_resources(overridable))
    assert "subnet/*" not in resources
    assert "image/" not in resources
    assert "security-group/" not in resources
    assert any(_names_template(r, template_id) for r in _resources(overridable))
    # ...and the network interface only in those subnets
    (interface,) = [r for r in runs if "network-interface/*" in " ".join(_resources(r))]
    assert interface not in (unchanged, overridable)
    subnets = interface["Condition"]["ArnLike"]["ec2:Subnet"]
    assert subnets
    assert sorted(json.dumps(s) for s in subnets) == sorted(
        r for r in _resources(overridable) if "subnet/" in r
    )
    assert len(runs) == 3


def test_create_fleet_only_on_fleets_and_this_template_in_the_stacks_region(synthesized: Synthesized) -> None:
    # Given acquire's CreateFleet statement
    (fleet,) = _acquire(synthesized, "ec2:CreateFleet")

    # Then it names fleets and the template, not '*', and holds only in the stack's region
    resources = _resources(fleet)
    assert '"*"' not in resources
    assert any("fleet/*" in r for r in resources)
    assert any(_names_template(r, _template_id(synthesized)) for r in resources)
    assert fleet["Condition"] == {"StringEquals": {"aws:RequestedRegion": {"Ref": "AWS::Region"}}}


def test_create_tags_only_while_launching_a_job_tagged_instance(synthesized: Synthesized) -> None:
    # Given acquire's CreateTags statement
    (tags,) = _acquire(synthesized, "ec2:CreateTags")

    # Then tags are written only by the launch itself, only with the job id among them, on instances and volumes
    assert tags["Condition"]["StringEquals"] == {"ec2:CreateAction": ["CreateFleet", "RunInstances"]}
    assert tags["Condition"]["Null"] == {"aws:RequestTag/spotrun:job-id": "false"}
    resources = " ".join(_resources(tags))
    assert "instance/*" in resources
    assert "volume/*" in resources
    assert "fleet/" not in resources


def test_pass_role_only_of_the_instance_role_to_ec2(synthesized: Synthesized) -> None:
    # Given acquire's PassRole statement and the instances' role
    (pass_role,) = _acquire(synthesized, "iam:PassRole")
    profile = next(iter(synthesized.resources("AWS::IAM::InstanceProfile").values()))
    (instance_role,) = profile["Properties"]["Roles"]

    # Then it passes that role only, and only to EC2
    assert pass_role["Resource"] == {"Fn::GetAtt": [instance_role["Ref"], "Arn"]}
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}

"""acquire's launch permissions in the synthesized template: launches only from the launch template, as it is.

moto's IAM access control cannot judge these statements offline: it evaluates only ``StringEquals`` conditions
and supplies condition values only for role trust policies (``moto/iam/access_control.py``,
``_check_conditions``), and its EC2 requests carry no ``ec2:LaunchTemplate``/``ec2:IsLaunchTemplateResource``
context. These tests read the statements themselves, then evaluate them with :mod:`tests.infra.policy_eval`
against the requests EC2 authorizes for a fleet launch, so the check fails both ways.
"""

from __future__ import annotations

import json

import pytest

from tests.infra.conftest import Synthesized
from tests.infra.policy_eval import allowed, role_statements
from tests.infra.test_storage_and_network import actions_of


def _acquire(synthesized: Synthesized, action: str) -> list[dict]:
    function = synthesized.marked("function")["acquire"]
    role = synthesized.properties(function)["Role"]["Fn::GetAtt"][0]
    return [s for s in role_statements(synthesized, role) if action in actions_of(s)]


def _resources(statement: dict) -> list[str]:
    resource = statement["Resource"]
    return [json.dumps(r) for r in (resource if isinstance(resource, list) else [resource])]


def _template_id(synthesized: Synthesized, *, efa: bool = False) -> str:
    return synthesized.launch_template(efa=efa)[0]


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


# --------------------------------------------------------------------------- the statements, evaluated offline

ARN = "arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:"
REGION = "<AWS::Region>"


def _launch_requests(synthesized: Synthesized) -> tuple[str, list[str], str]:
    """The template's ARN, the instances' subnets and the instance role, as requests name them."""
    template = f"{ARN}launch-template/<{_template_id(synthesized)}>"
    subnets = [
        f"{ARN}subnet/<{key}>" for key in synthesized.resources("AWS::EC2::Subnet") if "instances" in key
    ]
    profile = next(iter(synthesized.resources("AWS::IAM::InstanceProfile").values()))
    (role,) = profile["Properties"]["Roles"]
    return template, subnets, f"<{role['Ref']}.Arn>"


def _run_instances(
    template: str,
    subnet: str,
    *,
    image_from_template: bool = True,
    group_from_template: bool = True,
    placement_group: str | None = None,
) -> list[tuple[str, dict[str, object]]]:
    """What EC2 authorizes for one launch of a fleet: RunInstances on each resource, with its context.

    A resource the template names carries ``ec2:IsLaunchTemplateResource`` true unless the request overrides
    it; the subnet (and the placement group of a group's launch) comes from the fleet's override, and the network
    interface is created in the subnet.
    """
    base = {"ec2:LaunchTemplate": template}
    placed = (
        []
        if placement_group is None
        else [(placement_group, {**base, "ec2:IsLaunchTemplateResource": False})]
    )
    return [
        *placed,
        (
            f"arn:<AWS::Partition>:ec2:{REGION}::image/ami-0abc",
            {**base, "ec2:IsLaunchTemplateResource": image_from_template},
        ),
        (f"{ARN}security-group/sg-0abc", {**base, "ec2:IsLaunchTemplateResource": group_from_template}),
        (f"{ARN}volume/*", {**base, "ec2:IsLaunchTemplateResource": True}),
        (f"{ARN}instance/*", {**base, "ec2:IsLaunchTemplateResource": True}),
        (template, {**base, "ec2:IsLaunchTemplateResource": True}),
        (subnet, {**base, "ec2:IsLaunchTemplateResource": False}),
        (f"{ARN}network-interface/*", {**base, "ec2:IsLaunchTemplateResource": False, "ec2:Subnet": subnet}),
    ]


def _launch_allowed(statements: list[dict], requests: list[tuple[str, dict[str, object]]]) -> bool:
    return all(allowed(statements, "ec2:RunInstances", resource, context) for resource, context in requests)


def test_a_launch_from_the_template_is_allowed_and_every_way_out_of_it_denied(
    synthesized: Synthesized,
) -> None:
    # Given acquire's statements, evaluated offline (moto's IAM cannot: see the module's docstring)
    function = synthesized.marked("function")["acquire"]
    statements = role_statements(synthesized, synthesized.properties(function)["Role"]["Fn::GetAtt"][0])
    template, subnets, instance_role = _launch_requests(synthesized)
    assert subnets

    # Then a fleet from the template into one of the deployment's subnets launches, fleet and tags included
    assert allowed(statements, "ec2:CreateFleet", f"{ARN}fleet/fleet-0abc", {"aws:RequestedRegion": REGION})
    assert allowed(statements, "ec2:CreateFleet", template, {"aws:RequestedRegion": REGION})
    for subnet in subnets:
        assert _launch_allowed(statements, _run_instances(template, subnet))
    tags = {"ec2:CreateAction": "CreateFleet", "aws:RequestTag/spotrun:job-id": "tiny-0123456789ab"}
    assert allowed(statements, "ec2:CreateTags", f"{ARN}instance/i-0abc", tags)
    assert allowed(statements, "iam:PassRole", instance_role, {"iam:PassedToService": "ec2.amazonaws.com"})
    # ...while overriding the image or the security group, another template or another subnet is denied
    subnet = subnets[0]
    assert not _launch_allowed(statements, _run_instances(template, subnet, image_from_template=False))
    assert not _launch_allowed(statements, _run_instances(template, subnet, group_from_template=False))
    other_template = f"{ARN}launch-template/lt-0other"
    assert not _launch_allowed(statements, _run_instances(other_template, subnet))
    assert not _launch_allowed(statements, _run_instances(template, f"{ARN}subnet/subnet-0other"))
    # ...each resource on its own, too: the image of another template, an interface in another subnet
    (image, image_context) = _run_instances(other_template, subnet)[0]
    assert not allowed(statements, "ec2:RunInstances", image, image_context)
    interface, interface_context = _run_instances(template, f"{ARN}subnet/subnet-0other")[-1]
    assert not allowed(statements, "ec2:RunInstances", interface, interface_context)
    # ...as are a fleet in another region or from another template, tags outside a launch or without the job id,
    # and passing any other role or to any other service
    assert not allowed(
        statements, "ec2:CreateFleet", f"{ARN}fleet/fleet-0abc", {"aws:RequestedRegion": "eu-west-1"}
    )
    assert not allowed(statements, "ec2:CreateFleet", other_template, {"aws:RequestedRegion": REGION})
    assert not allowed(
        statements, "ec2:CreateTags", f"{ARN}instance/i-0abc", {"aws:RequestTag/spotrun:job-id": "x"}
    )
    assert not allowed(
        statements, "ec2:CreateTags", f"{ARN}instance/i-0abc", {"ec2:CreateAction": "CreateFleet"}
    )
    assert not allowed(
        statements, "iam:PassRole", "<SomeOtherRole.Arn>", {"iam:PassedToService": "ec2.amazonaws.com"}
    )
    assert not allowed(
        statements, "iam:PassRole", instance_role, {"iam:PassedToService": "lambda.amazonaws.com"}
    )


# --------------------------------------------------------------------------- multi-node groups: EFA and placement


def _function_statements(synthesized: Synthesized, function: str) -> list[dict]:
    role = synthesized.properties(synthesized.marked("function")[function])["Role"]["Fn::GetAtt"][0]
    return role_statements(synthesized, role)


def _placement_groups(synthesized: Synthesized) -> list[str]:
    """The deployment's placement groups as requests name them (their ARN is by name)."""
    return [
        f"{ARN}placement-group/<{key}.GroupName>" for key in synthesized.resources("AWS::EC2::PlacementGroup")
    ]


@pytest.mark.parametrize("function", ["acquire", "ec2_events"])
def test_group_launchers_may_launch_from_the_efa_template_into_the_placement_groups_only(
    synthesized: Synthesized, function: str
) -> None:
    # Given a function that launches multi-node groups, evaluated offline
    statements = _function_statements(synthesized, function)
    template, subnets, _role = _launch_requests(synthesized)
    efa_template = f"{ARN}launch-template/<{_template_id(synthesized, efa=True)}>"
    groups = _placement_groups(synthesized)
    assert len(groups) == len(subnets) >= 2

    # Then a fleet from either template into a subnet and the deployment's placement group launches
    assert allowed(statements, "ec2:CreateFleet", efa_template, {"aws:RequestedRegion": REGION})
    for launch_template in (template, efa_template):
        for subnet, group in zip(subnets, groups, strict=True):
            assert _launch_allowed(statements, _run_instances(launch_template, subnet, placement_group=group))
    # ...while a placement group of someone else's is denied, from either template
    other_group = f"{ARN}placement-group/someone-elses"
    for launch_template in (template, efa_template):
        requests = _run_instances(launch_template, subnets[0], placement_group=other_group)
        assert not _launch_allowed(statements, requests)
    # ...as is the placement group used by a launch from another template
    other_template = f"{ARN}launch-template/lt-0other"
    assert not allowed(
        statements,
        "ec2:RunInstances",
        groups[0],
        {"ec2:LaunchTemplate": other_template, "ec2:IsLaunchTemplateResource": False},
    )


def test_a_function_that_launches_no_group_gets_neither_the_efa_template_nor_the_placement_groups(
    synthesized: Synthesized,
) -> None:
    # Given the function that returns a deadline job to spot: it launches single instances only
    statements = _function_statements(synthesized, "deadline_return")
    template, subnets, _role = _launch_requests(synthesized)
    efa_template = f"{ARN}launch-template/<{_template_id(synthesized, efa=True)}>"
    group = _placement_groups(synthesized)[0]

    # Then it launches from the plain template, and neither from the EFA one nor into a placement group
    assert _launch_allowed(statements, _run_instances(template, subnets[0]))
    assert not allowed(statements, "ec2:CreateFleet", efa_template, {"aws:RequestedRegion": REGION})
    assert not _launch_allowed(statements, _run_instances(efa_template, subnets[0]))
    assert not _launch_allowed(statements, _run_instances(template, subnets[0], placement_group=group))

"""Launching instances: from the deployment's launch templates only, into its subnets and placement groups only.

A function that reads ``launch_template_name`` may launch from the plain template; ``efa_launch_template_name``
and ``placement_group_names`` widen that grant to the EFA template and to the deployment's cluster placement
groups, for the functions that declare them (those that launch multi-node groups) and no other.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws

from infra.constructs.iam.grant_types import INSTANCES, NO_RESOURCE_LEVEL, Grant, Targets, arn_of
from spotrun.model.layout import JOB_ID_TAG

# Settings that refine the launch grant of launch_template_name rather than imply a grant of their own.
LAUNCH_REFINEMENTS = frozenset({"efa_launch_template_name", "placement_group_names"})


def launch_grants(targets: Targets, *, efa: bool, placement: bool) -> list[Grant]:
    """Launches from the deployment's launch templates and nothing else.

    EC2 authorizes an instant fleet's launches as the caller's ``ec2:RunInstances`` on every resource the launch
    touches (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-fleet-prerequisites.html, "Permissions for
    EC2 Fleet users"). ``ec2:LaunchTemplate`` ties each of them to the templates, and
    ``ec2:IsLaunchTemplateResource`` = true refuses a request that overrides a resource a template names, such
    as the image (``ImageId`` is an override of CreateFleet) (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/
    use-launch-templates-to-control-launching-instances.html, "Control the use of launch templates"). The
    subnet and the placement group are not in the templates: each fleet override names them, so they are granted
    on the deployment's own subnets and placement groups only (a placement group's ARN is by name:
    ``placement-group/<name>``), and the network interface EC2 creates only in those subnets (``ec2:Subnet``).

    Parameters
    ----------
    targets
        The stack's resources.
    efa
        Also the EFA launch template (the function reads ``efa_launch_template_name``).
    placement
        Also the cluster placement groups (the function reads ``placement_group_names``).

    Returns
    -------
    list[Grant]
        CreateFleet, RunInstances, CreateTags while launching, the reads a launch needs, PassRole of the instance
        role, and EC2's service-linked roles.
    """
    templates = [arn_of("ec2", f"launch-template/{targets.launch_template_id}")]
    if efa:
        templates.append(arn_of("ec2", f"launch-template/{targets.efa_launch_template_id}"))
    this_region = {"StringEquals": {"aws:RequestedRegion": Aws.REGION}}
    from_template: dict[str, dict[str, Any]] = {"ArnLike": {"ec2:LaunchTemplate": templates}}
    template_resources = {**from_template, "Bool": {"ec2:IsLaunchTemplateResource": "true"}}
    subnets = tuple(arn_of("ec2", f"subnet/{subnet_id}") for subnet_id in targets.subnet_ids)
    groups = (
        tuple(arn_of("ec2", f"placement-group/{name}") for name in targets.placement_group_names)
        if placement
        else ()
    )
    which = "launch templates" if efa else "launch template"
    return [
        Grant(
            ("ec2:CreateFleet",),
            (arn_of("ec2", "fleet/*"), *templates),
            f"CreateFleet on fleets (whose ids exist only once EC2 makes them) and on the deployment's {which} "
            "only, in the stack's region; what a fleet may launch is confined by the RunInstances statements "
            "(ec2:LaunchTemplate)",
            this_region,
        ),
        Grant(
            ("ec2:RunInstances",),
            (
                arn_of("ec2", "image/*", account=False),
                arn_of("ec2", "security-group/*"),
                arn_of("ec2", "volume/*"),
                arn_of("ec2", "instance/*"),
            ),
            f"the image, security group, volumes and instances of a launch from the deployment's {which} "
            "(ec2:LaunchTemplate), and only as the template names them (ec2:IsLaunchTemplateResource: an "
            "override of the image or security group is refused)",
            template_resources,
        ),
        Grant(
            ("ec2:RunInstances",),
            (*templates, *subnets, *groups),
            f"the {which} and the deployment's own subnets"
            + (" and cluster placement groups" if placement else "")
            + " (each fleet override names them; the templates name none), only for launches from them",
            from_template,
        ),
        Grant(
            ("ec2:RunInstances",),
            (arn_of("ec2", "network-interface/*"),),
            f"the network interface of a launch from the deployment's {which}, only in the deployment's "
            "own subnets (ec2:Subnet)",
            {"ArnLike": {"ec2:LaunchTemplate": templates, "ec2:Subnet": list(subnets)}},
        ),
        Grant(
            ("ec2:CreateTags",),
            (INSTANCES, arn_of("ec2", "volume/*")),
            "tags only while launching, and only a launch that carries the job id tag (the tag every later "
            "call is conditioned on)",
            {
                "StringEquals": {"ec2:CreateAction": ["CreateFleet", "RunInstances"]},
                "Null": {f"aws:RequestTag/{JOB_ID_TAG}": "false"},
            },
        ),
        Grant(
            ("ec2:DescribeLaunchTemplateVersions", "ec2:DescribeImages"),
            ("*",),
            NO_RESOURCE_LEVEL,
        ),
        Grant(
            ("iam:PassRole",),
            (targets.instance_role_arn,),
            "hands the instance role to EC2 for the launched instances, and nothing else",
            {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        ),
        Grant(
            ("iam:CreateServiceLinkedRole",),
            (
                arn_of(
                    "iam", "role/aws-service-role/spot.amazonaws.com/AWSServiceRoleForEC2Spot", region=False
                ),
                arn_of(
                    "iam",
                    "role/aws-service-role/ec2fleet.amazonaws.com/AWSServiceRoleForEC2Fleet",
                    region=False,
                ),
            ),
            "the first spot launch in an account creates EC2's own service-linked roles",
            {"StringEquals": {"iam:AWSServiceName": ["spot.amazonaws.com", "ec2fleet.amazonaws.com"]}},
        ),
    ]

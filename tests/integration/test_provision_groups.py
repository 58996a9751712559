"""The emulator's copy of what multi-node groups launch with: a cluster placement group per subnet, the EFA launch
template, and a security group its members reach each other through."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spotrun.local.runtime import LocalRuntime


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    with LocalRuntime(tmp_path_factory.mktemp("groups"), time_scale=0.01) as started:
        yield started


def test_one_cluster_placement_group_per_subnet_in_the_subnets_order(runtime: LocalRuntime) -> None:
    # Given the deployment's settings and EC2's view of its subnets and placement groups
    ec2 = runtime.client("ec2")
    settings = runtime.settings
    zones = {
        s["SubnetId"]: s["AvailabilityZone"]
        for s in ec2.describe_subnets(SubnetIds=list(settings.subnet_ids))["Subnets"]
    }

    # When the groups the settings name are described
    groups = ec2.describe_placement_groups(GroupNames=list(settings.placement_group_names))["PlacementGroups"]

    # Then each subnet has its own cluster group, named after its zone, listed in the order of the subnets
    assert len(groups) == len(settings.subnet_ids) == len(set(settings.placement_group_names))
    assert {g["Strategy"] for g in groups} == {"cluster"}
    assert list(settings.placement_group_names) == [
        f"spotrun-cluster-{zones[subnet]}" for subnet in settings.subnet_ids
    ]


def test_the_efa_template_is_the_plain_one_with_an_efa_as_its_interface(runtime: LocalRuntime) -> None:
    # Given the two launch templates the settings name
    ec2 = runtime.client("ec2")
    group_id = runtime.deployment.security_group_id

    def data(name: str) -> dict:
        versions = ec2.describe_launch_template_versions(LaunchTemplateName=name)["LaunchTemplateVersions"]
        return dict(versions[0]["LaunchTemplateData"])

    # When they are read
    plain = data(runtime.settings.launch_template_name)
    efa = data(runtime.settings.efa_launch_template_name)

    # Then the EFA one carries the instances' group on one EFA interface, and is otherwise the same template
    assert efa.pop("NetworkInterfaces") == [{"DeviceIndex": 0, "InterfaceType": "efa", "Groups": [group_id]}]
    assert plain.pop("SecurityGroupIds") == [group_id]
    assert efa == plain
    assert runtime.settings.efa_launch_template_name != runtime.settings.launch_template_name

"""Buckets, tables, the VPC and the instances' side of the synthesized stack."""

from __future__ import annotations

import base64
import json

import pytest

from spotrun.shape import SHAPE
from tests.infra.conftest import Synthesized, get_att, ref


def actions_of(statement: dict) -> list[str]:
    """The actions of an IAM statement, always as a list."""
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def statements_of(synthesized: Synthesized, role_id: str) -> list[dict]:
    """Every statement of every inline policy attached to the role ``role_id``."""
    found = []
    for policy in synthesized.resources("AWS::IAM::Policy").values():
        if ref(role_id) in policy["Properties"].get("Roles", []):
            found += policy["Properties"]["PolicyDocument"]["Statement"]
    return found


def test_every_bucket_is_private_encrypted_versioned_and_tls_only(synthesized: Synthesized) -> None:
    # Given the shape's buckets in the template
    buckets = synthesized.marked("bucket")
    policies = synthesized.resources("AWS::S3::BucketPolicy").values()

    # Then each is encrypted, blocks public access, keeps versions and refuses plain HTTP
    for spec in SHAPE.buckets:
        props = synthesized.properties(buckets[spec.logical_name])
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0][
            "ServerSideEncryptionByDefault"
        ]
        assert set(props["PublicAccessBlockConfiguration"].values()) == {True}
        assert props["VersioningConfiguration"] == {"Status": "Enabled"}
        policy = next(
            p["Properties"] for p in policies if p["Properties"]["Bucket"] == ref(buckets[spec.logical_name])
        )
        deny = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
        assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in deny)


def test_jobs_bucket_sends_events_and_expires_superseded_checkpoints(synthesized: Synthesized) -> None:
    # Given the two buckets
    buckets = synthesized.marked("bucket")
    jobs = synthesized.properties(buckets["jobs"])
    archive = synthesized.properties(buckets["archive"])

    # Then only the jobs bucket notifies EventBridge, and old checkpoint versions expire under jobs/
    assert jobs["NotificationConfiguration"] == {"EventBridgeConfiguration": {"EventBridgeEnabled": True}}
    assert "NotificationConfiguration" not in archive
    rules = {rule["Id"]: rule for rule in jobs["LifecycleConfiguration"]["Rules"]}
    checkpoints = rules["expire-superseded-checkpoints"]
    assert checkpoints["Prefix"] == "jobs/"
    assert checkpoints["NoncurrentVersionExpiration"]["NoncurrentDays"] > 0
    assert all(rule["Status"] == "Enabled" for rule in rules.values())


def test_tables_have_the_declared_keys_on_demand_billing_and_recovery(synthesized: Synthesized) -> None:
    # Given the shape's tables in the template
    tables = synthesized.marked("table")

    # Then keys, TTL, billing, point-in-time recovery and encryption are as declared
    for spec in SHAPE.tables:
        props = synthesized.properties(tables[spec.logical_name])
        keys = {item["AttributeName"]: item["KeyType"] for item in props["KeySchema"]}
        assert keys == {spec.partition_key: "HASH", **({spec.sort_key: "RANGE"} if spec.sort_key else {})}
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert props["SSESpecification"]["SSEEnabled"] is True
        if spec.ttl_attribute:
            assert props["TimeToLiveSpecification"] == {"AttributeName": spec.ttl_attribute, "Enabled": True}


@pytest.mark.parametrize("efa", [False, True], ids=["plain", "efa"])
def test_launch_template_requires_imdsv2_and_installs_the_agent(synthesized: Synthesized, efa: bool) -> None:
    # Given either launch template
    _, template = synthesized.launch_template(efa=efa)
    data = template["Properties"]["LaunchTemplateData"]

    # Then IMDSv2 is required, the root volume is encrypted, and user data sets up NVMe and the agent
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert all(device["Ebs"]["Encrypted"] for device in data["BlockDeviceMappings"])
    assert data["InstanceInitiatedShutdownBehavior"] == "terminate"
    parts = data["UserData"]["Fn::Base64"]["Fn::Join"][1]
    script = "".join(part if isinstance(part, str) else "<token>" for part in parts)
    for expected in (
        "/mnt/nvme",
        "mdadm",
        "SPOTRUN_NVME_ROOT",
        '/venv/bin/pip" install',
        "aws s3 cp",
        "ready",
    ):
        assert expected in script
    (profile_id,) = synthesized.resources("AWS::IAM::InstanceProfile")
    assert data["IamInstanceProfile"] == {"Arn": get_att(profile_id)}


def test_instances_security_group_admits_only_its_own_members(synthesized: Synthesized) -> None:
    # Given the security groups of the template and their separate rules
    groups = synthesized.resources("AWS::EC2::SecurityGroup")
    ingress = list(synthesized.resources("AWS::EC2::SecurityGroupIngress").values())
    (instances_group,) = [key for key in groups if "InstanceSecurityGroup" in key]

    # Then no group has an inline inbound rule, and the one separate rule lets the instances' group reach itself,
    # on every protocol and port (an EFA needs exactly that: efa-start.html#efa-start-security), from no address
    assert groups
    assert all(not group["Properties"].get("SecurityGroupIngress") for group in groups.values())
    assert [rule["Properties"] for rule in ingress] == [
        {
            "IpProtocol": "-1",
            "GroupId": get_att(instances_group, "GroupId"),
            "SourceSecurityGroupId": get_att(instances_group, "GroupId"),
            "Description": "from the instances' own group: a job's nodes",
        }
    ]
    # ...and the group may send to itself, beside HTTPS and HTTP out (EFA's outbound half of the pair)
    egress = synthesized.properties(instances_group)["SecurityGroupEgress"]
    separate = [r["Properties"] for r in synthesized.resources("AWS::EC2::SecurityGroupEgress").values()]
    assert sorted(rule["FromPort"] for rule in egress) == [80, 443]
    assert [(r["IpProtocol"], r["GroupId"], r["DestinationSecurityGroupId"]) for r in separate] == [
        ("-1", get_att(instances_group, "GroupId"), get_att(instances_group, "GroupId"))
    ]


def test_one_cluster_placement_group_per_instance_subnet_named_in_the_settings(
    synthesized: Synthesized,
) -> None:
    # Given the placement groups, the instances' subnets and acquire's environment
    groups = synthesized.resources("AWS::EC2::PlacementGroup")
    subnets = [key for key in synthesized.resources("AWS::EC2::Subnet") if "instances" in key]
    variables = synthesized.properties(synthesized.marked("function")["acquire"])["Environment"]["Variables"]

    # When the two comma-separated settings are read as lists of references
    def listed(variable: str) -> list[dict]:
        separator, parts = variables[variable]["Fn::Join"]
        assert separator == ""
        return [part for part in parts if part != ","]

    named_groups, named_subnets = listed("SPOTRUN_PLACEMENT_GROUP_NAMES"), listed("SPOTRUN_SUBNET_IDS")

    # Then there is one cluster group per subnet (a cluster group lives in one zone), each named once, beside the
    # subnets in the same order as the network construct made them
    assert len(groups) == len(subnets) == len(named_groups) == len(named_subnets) >= 2
    assert all(group["Properties"]["Strategy"] == "cluster" for group in groups.values())
    assert [get_att(key, "GroupName") for key in sorted(groups)] == named_groups
    assert [ref(key) for key in sorted(subnets)] == named_subnets


def test_the_efa_template_is_the_plain_one_with_an_efa_as_its_network_interface(
    synthesized: Synthesized,
) -> None:
    # Given the two launch templates
    _, plain = synthesized.launch_template()
    _, efa = synthesized.launch_template(efa=True)
    plain_data = dict(plain["Properties"]["LaunchTemplateData"])
    efa_data = dict(efa["Properties"]["LaunchTemplateData"])
    (instances_group,) = [k for k in synthesized.resources("AWS::EC2::SecurityGroup") if "Instance" in k]

    # Then the EFA one carries the instances' group on one EFA interface (no subnet: each override names it),
    # the plain one on the instance; apart from that and their names they are the same template
    assert efa_data.pop("NetworkInterfaces") == [
        {"DeviceIndex": 0, "InterfaceType": "efa", "Groups": [get_att(instances_group, "GroupId")]}
    ]
    assert plain_data.pop("SecurityGroupIds") == [get_att(instances_group, "GroupId")]
    for data in (plain_data, efa_data):
        data.pop("TagSpecifications", None)  # each names its own template in its tags
    assert efa_data == plain_data
    assert efa["Properties"]["LaunchTemplateName"] != plain["Properties"]["LaunchTemplateName"]


def test_new_vpc_has_private_egress_a_gateway_endpoint_and_flow_logs(synthesized: Synthesized) -> None:
    # Given the network resources
    endpoints = synthesized.resources("AWS::EC2::VPCEndpoint").values()

    # Then one NAT gateway, an S3 gateway endpoint, and flow logs
    assert len(synthesized.resources("AWS::EC2::NatGateway")) == 1
    assert any(e["Properties"].get("VpcEndpointType", "Gateway") == "Gateway" for e in endpoints)
    assert len(synthesized.resources("AWS::EC2::FlowLog")) == 1


def test_agent_document_is_the_emulators_and_carries_the_shapes_name(synthesized: Synthesized) -> None:
    # Given the SSM document of the template
    (document,) = synthesized.resources("AWS::SSM::Document").values()
    props = document["Properties"]

    # Then it has the shape's name, starts the agent detached, from the one declaration the emulator also uses
    assert props["Name"] == SHAPE.agent_document_name
    assert props["DocumentType"] == "Command"
    assert props["Content"] == SHAPE.agent_document()
    assert 'spotrun-agent run --command-uri \\"$SSM_commandUri\\"' in json.dumps(props["Content"])


def test_instance_role_reaches_no_jobs_object_only_metrics_and_the_agent_routes(
    synthesized: Synthesized,
) -> None:
    # Given the instances' role (the one assumed by EC2)
    roles = synthesized.resources("AWS::IAM::Role")
    ec2 = {"Service": "ec2.amazonaws.com"}
    (role_id,) = [
        key
        for key, role in roles.items()
        if role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == ec2
    ]
    by_action = {action: s for s in statements_of(synthesized, role_id) for action in actions_of(s)}

    # Then: SSM core, metrics in the spotrun namespace only, no workflow action, and of S3 only the agent
    # package's object (its job's objects it reaches with its job's credentials: tests/infra/test_job_access.py)
    managed = json.dumps(roles[role_id]["Properties"]["ManagedPolicyArns"])
    assert "AmazonSSMManagedInstanceCore" in managed
    s3_actions = {action for action in by_action if action.startswith("s3:")}
    assert s3_actions == {"s3:GetObject"}
    agent_package = json.dumps(by_action["s3:GetObject"]["Resource"])
    assert "cdk-" in agent_package or "AssetParameters" in agent_package or ".zip" in agent_package, (
        agent_package
    )
    assert not any(bucket_id in agent_package for bucket_id in synthesized.resources("AWS::S3::Bucket"))
    assert by_action["cloudwatch:PutMetricData"]["Condition"] == {
        "StringEquals": {"cloudwatch:namespace": "spotrun"}
    }
    # (no Step Functions action: tests/infra/test_agent_reports.py checks the agent route instead)
    assert not [action for action in by_action if action.startswith("states:")]


def test_user_data_is_plain_text_that_fits_ec2s_limit(synthesized: Synthesized) -> None:
    # Given the user data script with its tokens as placeholders (both templates run the same one)
    _, template = synthesized.launch_template()
    parts = template["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]["Fn::Join"][1]
    script = "".join(part if isinstance(part, str) else "x" * 80 for part in parts)

    # Then it is a bash script under EC2's 16 KB limit once base64-encoded
    assert script.startswith("#!/bin/bash")
    assert len(base64.b64encode(script.encode())) < 16 * 1024

"""Buckets, tables, the VPC and the instances' side of the synthesized stack."""

from __future__ import annotations

import base64
import json

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


def test_launch_template_requires_imdsv2_and_installs_the_agent(synthesized: Synthesized) -> None:
    # Given the one launch template
    (template,) = synthesized.resources("AWS::EC2::LaunchTemplate").values()
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


def test_instances_security_group_admits_nothing(synthesized: Synthesized) -> None:
    # Given the security groups of the template
    groups = synthesized.resources("AWS::EC2::SecurityGroup")

    # Then none has an inbound rule, inline or separate
    assert groups
    assert all(not group["Properties"].get("SecurityGroupIngress") for group in groups.values())
    assert not synthesized.resources("AWS::EC2::SecurityGroupIngress")


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
    # Given the user data script with its tokens as placeholders
    (template,) = synthesized.resources("AWS::EC2::LaunchTemplate").values()
    parts = template["Properties"]["LaunchTemplateData"]["UserData"]["Fn::Base64"]["Fn::Join"][1]
    script = "".join(part if isinstance(part, str) else "x" * 80 for part in parts)

    # Then it is a bash script under EC2's 16 KB limit once base64-encoded
    assert script.startswith("#!/bin/bash")
    assert len(base64.b64encode(script.encode())) < 16 * 1024

"""The embedded runtime provisions exactly what spotrun.shape declares."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto.s3.models import s3_backends

from spotrun.local.provision import bucket_name, function_name, rule_name, table_name
from spotrun.local.runtime import LocalRuntime
from spotrun.shape import SHAPE, STATE_MACHINE_FILE, rule_pattern


def _asl_using_every_placeholder() -> str:
    """A valid ASL document that references every substitution of the shape (one Pass state each)."""
    names = list(SHAPE.state_machine_functions)
    states = {
        name: {
            "Type": "Pass",
            "Result": f"${{{name}}}",
            **({"Next": names[i + 1]} if i + 1 < len(names) else {"End": True}),
        }
        for i, name in enumerate(names)
    }
    return json.dumps({"StartAt": names[0], "States": states})


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    workdir = tmp_path_factory.mktemp("provision")
    asl = workdir / "job.asl.json"
    asl.write_text(_asl_using_every_placeholder())
    with LocalRuntime(workdir, time_scale=0.01, state_machine_file=asl) as started:
        yield started


def test_every_function_of_the_shape_exists_as_declared(runtime: LocalRuntime) -> None:
    # Given the shape's functions
    lambda_ = runtime.client("lambda")

    # When each is looked up by its deployed name
    configs = {
        spec.name: lambda_.get_function(FunctionName=function_name(spec.name))["Configuration"]
        for spec in SHAPE.functions
    }

    # Then handler, timeout and memory are the declared ones
    for spec in SHAPE.functions:
        assert configs[spec.name]["Handler"] == spec.handler
        assert configs[spec.name]["Timeout"] == spec.timeout_seconds
        assert configs[spec.name]["MemorySize"] == spec.memory_mb
    assert len(lambda_.list_functions()["Functions"]) == len(SHAPE.functions)


def test_every_table_exists_on_demand_with_its_keys(runtime: LocalRuntime) -> None:
    # Given the shape's tables
    dynamodb = runtime.client("dynamodb")

    for spec in SHAPE.tables:
        # When each is described
        table = dynamodb.describe_table(TableName=table_name(spec.logical_name))["Table"]
        ttl = dynamodb.describe_time_to_live(TableName=table_name(spec.logical_name))["TimeToLiveDescription"]

        # Then keys, billing and TTL follow the declaration
        keys = {k["KeyType"]: k["AttributeName"] for k in table["KeySchema"]}
        assert keys["HASH"] == spec.partition_key
        assert keys.get("RANGE") == spec.sort_key
        assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        if spec.ttl_attribute:
            assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": spec.ttl_attribute}


def test_every_bucket_exists_private_encrypted_and_versioned(runtime: LocalRuntime) -> None:
    # Given the shape's buckets
    s3 = runtime.client("s3")

    for spec in SHAPE.buckets:
        name = bucket_name(spec.logical_name)

        # When its configuration is read
        block = s3.get_public_access_block(Bucket=name)["PublicAccessBlockConfiguration"]
        encryption = s3.get_bucket_encryption(Bucket=name)["ServerSideEncryptionConfiguration"]
        versioning = s3.get_bucket_versioning(Bucket=name)
        # moto does not echo EventBridgeConfiguration in GetBucketNotificationConfiguration: read its model.
        notifications = s3_backends["123456789012"]["aws"].get_bucket(name).notification_configuration

        # Then it is private, encrypted, versioned as declared, and notifies EventBridge where declared
        assert all(block.values())
        assert encryption["Rules"][0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
        assert (versioning.get("Status") == "Enabled") == spec.versioned
        has_eventbridge = notifications is not None and notifications.event_bridge is not None
        assert has_eventbridge == spec.eventbridge_notifications


def test_every_rule_targets_its_function_with_the_bucket_scoped_pattern(runtime: LocalRuntime) -> None:
    # Given the shape's rules
    events = runtime.client("events")
    buckets = {b.logical_name: bucket_name(b.logical_name) for b in SHAPE.buckets}

    for spec in SHAPE.rules:
        # When the rule and its targets are read
        bus = {} if spec.bus is None else {"EventBusName": runtime.deployment.bus_names[spec.bus]}
        rule = events.describe_rule(Name=rule_name(spec.name), **bus)
        targets = events.list_targets_by_rule(Rule=rule_name(spec.name), **bus)["Targets"]

        # Then the pattern carries the real bucket name and the target is the declared function
        assert json.loads(rule["EventPattern"]) == rule_pattern(spec, buckets)
        assert rule["State"] == "ENABLED"
        assert [t["Arn"] for t in targets] == [runtime.deployment.function_arns[spec.target_function]]


def test_state_machine_gets_every_function_arn(runtime: LocalRuntime) -> None:
    # Given the provisioned state machine
    sfn = runtime.client("stepfunctions")

    # When its definition is read
    definition = sfn.describe_state_machine(stateMachineArn=runtime.settings.state_machine_arn)["definition"]

    # Then every placeholder holds the ARN of its function
    assert "${" not in definition
    for placeholder, name in SHAPE.state_machine_functions.items():
        assert (
            json.loads(definition)["States"][placeholder]["Result"] == runtime.deployment.function_arns[name]
        )
    assert runtime.settings.state_machine_arn.endswith(":stateMachine:spotrun-job")


def test_agent_document_network_and_launch_template(runtime: LocalRuntime) -> None:
    # Given the SSM and EC2 clients
    ssm, ec2 = runtime.client("ssm"), runtime.client("ec2")

    # When the agent document, subnets, security group and launch template are read
    document = ssm.describe_document(Name=SHAPE.agent_document_name)["Document"]
    content = json.loads(ssm.get_document(Name=SHAPE.agent_document_name)["Content"])
    subnets = ec2.describe_subnets(SubnetIds=list(runtime.settings.subnet_ids))["Subnets"]
    group = ec2.describe_security_groups(GroupIds=[runtime.deployment.security_group_id])["SecurityGroups"][0]
    template = ec2.describe_launch_template_versions(LaunchTemplateName=runtime.settings.launch_template_name)

    # Then they are as the deployment needs them
    assert document["DocumentType"] == "Command"
    assert content["schemaVersion"] == "2.2"
    assert set(content["parameters"]) == {"commandUri"}
    command = content["mainSteps"][0]["inputs"]["runCommand"][-1]
    assert 'spotrun-agent run --command-uri "$SSM_commandUri"' in command
    assert command.rstrip().endswith("&")
    assert sorted(s["AvailabilityZone"] for s in subnets) == [
        "us-east-1a",
        "us-east-1b",
        "us-east-1c",
        "us-east-1d",
    ]
    # (inbound from the group's own members only: a multi-node job's nodes reach each other, nothing else does)
    assert [
        (p["IpProtocol"], [g["GroupId"] for g in p["UserIdGroupPairs"]], p["IpRanges"])
        for p in group["IpPermissions"]
    ] == [("-1", [runtime.deployment.security_group_id], [])]
    data = template["LaunchTemplateVersions"][0]["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert data["SecurityGroupIds"] == [runtime.deployment.security_group_id]


def test_settings_and_environment_name_the_deployment(runtime: LocalRuntime) -> None:
    # Given the running runtime
    settings = runtime.settings

    # When its settings and environment are read
    env = runtime.env

    # Then they carry the deployed names, the endpoint and fake credentials
    assert settings.jobs_table == "spotrun-jobs"
    assert settings.idempotency_table == "spotrun-idempotency"
    assert settings.jobs_bucket == "spotrun-jobs-local"
    assert settings.archive_bucket == "spotrun-archive-local"
    assert settings.agent_document_name == SHAPE.agent_document_name
    assert settings.time_scale == 0.01
    assert len(settings.subnet_ids) == 4
    assert env["AWS_ENDPOINT_URL"] == runtime.endpoint_url
    assert env["AWS_ACCESS_KEY_ID"] == "testing"
    assert env["POWERTOOLS_TRACE_DISABLED"] == "true"
    assert env["MOTO_PORT"] == runtime.endpoint_url.rsplit(":", 1)[1]
    assert {k: v for k, v in env.items() if k.startswith("SPOTRUN_")} == settings.to_env()


@pytest.mark.skipif(not STATE_MACHINE_FILE.exists(), reason="statemachines/job.asl.json is not written yet")
def test_the_real_state_machine_file_provisions(runtime: LocalRuntime, tmp_path: Path) -> None:
    # Given the module's runtime stopped (moto's state is process-wide: one runtime at a time)
    runtime.stop()

    # When a runtime starts with the repository's ASL file
    with LocalRuntime(tmp_path, time_scale=0.01) as real:
        definition = real.client("stepfunctions").describe_state_machine(
            stateMachineArn=real.settings.state_machine_arn
        )["definition"]

    # Then every placeholder was filled from the shape
    assert "${" not in definition

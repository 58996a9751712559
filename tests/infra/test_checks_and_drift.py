"""cdk-nag, cfn-lint and drift: the template passes the checks, and deploys exactly what the emulator runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from aws_cdk import aws_s3 as s3
from cfnlint.api import lint_file
from moto import mock_aws

from infra.app import build_app
from infra.constructs.control_plane.bundling import lambda_trees
from spotrun.local.patches import ec2_placement
from spotrun.local.patches.reversible import PatchSet
from spotrun.local.provision import Deployment, provision
from spotrun.shape import SHAPE, STATE_MACHINE_FILE
from tests.infra.conftest import Synthesized

# CDK writes DependsOn entries that a Ref/GetAtt already implies; cfn-lint warns about them (W3005).
ACCEPTED_LINT_RULES = {"W3005"}


def test_cdk_nag_passes_and_every_acknowledgment_has_a_reason(synthesized: Synthesized) -> None:
    # Given the synthesized assembly (the fixture's synth would have raised on any unacknowledged finding)
    report = json.loads((synthesized.outdir / "validation-report.json").read_text())
    acknowledgments = [
        rule
        for resource in synthesized.template["Resources"].values()
        for rule in resource.get("Metadata", {}).get("cdk_nag", {}).get("rules_to_suppress", [])
    ]

    # Then no plugin reported a violation, and each acknowledged finding says why
    assert all(plugin.get("summary", {}).get("status") != "failure" for plugin in report["pluginReports"])
    assert any(rule["id"].startswith("AwsSolutions-") for rule in acknowledgments)
    for rule in acknowledgments:
        assert len(rule["reason"].strip()) >= 20, rule


def test_cdk_nag_fails_the_synth_on_an_unacknowledged_finding(tmp_path: Path) -> None:
    # Given the app with one bucket added that breaks AwsSolutions rules (no access logs, plain HTTP allowed)
    app, stack = build_app(outdir=str(tmp_path))
    s3.Bucket(stack, "Careless")

    # When it is synthesized, Then the synth fails naming the finding
    with pytest.raises(RuntimeError, match=r"AwsSolutions-S1\b"):
        app.synth()


def test_cfn_lint_reports_no_error_and_only_cdks_own_warning(synthesized: Synthesized) -> None:
    # Given the template on disk
    template = synthesized.outdir / f"{synthesized.stack_name}.template.json"

    # When cfn-lint checks it
    matches = lint_file(template)

    # Then there is no error, and the only warnings are the accepted ones
    unexpected = [
        f"{m.rule.id} {m.message} ({m.path})" for m in matches if m.rule.id not in ACCEPTED_LINT_RULES
    ]
    assert not unexpected, "\n".join(unexpected)


@pytest.fixture(scope="module")
def emulator() -> Iterator[Deployment]:
    # moto has no placement groups; the emulator adds them, and provisioning makes one per subnet.
    patches = PatchSet()
    ec2_placement.install(patches, ec2_placement.PlacementGroups())
    try:
        with mock_aws():
            yield provision(
                lambda service: boto3.client(
                    service,
                    region_name="us-east-1",
                    aws_access_key_id="testing",
                    aws_secret_access_key="testing",
                ),
                SHAPE,
                STATE_MACHINE_FILE,
                time_scale=1.0,
            )
    finally:
        patches.undo_all()


def test_stack_and_emulator_deploy_the_same_functions_rules_tables_buckets_and_buses(
    synthesized: Synthesized, emulator: Deployment
) -> None:
    # Given what the emulator provisions and what the stack declares, by the shape's names
    local = {
        "function": set(emulator.function_names),
        "rule": set(emulator.rule_names),
        "table": set(emulator.table_names),
        "bucket": set(emulator.bucket_names),
        "bus": set(emulator.bus_names),
    }
    resource_types = {
        "function": "AWS::Lambda::Function",
        "rule": "AWS::Events::Rule",
        "table": "AWS::DynamoDB::Table",
        "bucket": "AWS::S3::Bucket",
        "bus": "AWS::Events::EventBus",
    }

    # Then each kind holds the same names on both sides, and the stack has no unmarked resource of that kind
    for kind, resource_type in resource_types.items():
        deployed = synthesized.marked(kind)
        assert set(deployed) == local[kind], kind
        assert set(deployed.values()) == set(synthesized.resources(resource_type)), (
            f"unmarked {resource_type}"
        )


def test_lambda_package_holds_handlers_core_and_yaml_but_not_the_emulator(synthesized: Synthesized) -> None:
    # Given the Lambda package as staged in the assembly
    (function,) = [synthesized.properties(synthesized.marked("function")["submit"])]
    package = synthesized.outdir / f"asset.{function['Code']['S3Key'].removesuffix('.zip')}"

    # Then every declared handler module is inside, with the core and PyYAML, and the emulator is left out
    for spec in SHAPE.functions:
        module = spec.handler.rsplit(".", 1)[0]
        assert (package / (module.replace(".", "/") + ".py")).is_file()
    assert (package / "spotrun" / "aws" / "settings.py").is_file()
    assert (package / "yaml" / "__init__.py").is_file()
    for left_out in ("local", "cli", "agent"):
        assert not (package / "spotrun" / left_out).exists(), left_out
    assert not list(package.rglob("__pycache__"))
    assert {tree.target.split("/")[0] for tree in lambda_trees()} == {"functions", "spotrun", "yaml"}

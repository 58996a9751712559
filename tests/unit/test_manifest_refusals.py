"""Unit tests of spotrun.model.manifest.schema: invalid manifests, one problem each, named by its field path."""

from __future__ import annotations

import pytest

from tests.unit.test_manifest import assert_one_error, errors_of, minimal_with


@pytest.mark.parametrize(
    ("text", "path", "fragment"),
    [
        pytest.param(
            minimal_with("resorces: {gpus_per_node: 1}\n"), "resorces", "unknown field", id="top-level typo"
        ),
        pytest.param(
            minimal_with("capacity: {spto: true}\n"), "capacity.spto", "unknown field", id="nested typo"
        ),
        pytest.param(
            "training: {command: [python, train.py]}\n",
            "name",
            "required field is missing",
            id="missing name",
        ),
        pytest.param(
            "name: a\ntraining: {env: {A: b}}\n",
            "training.command",
            "required field is missing",
            id="missing command",
        ),
        pytest.param("name: a\n", "training", "required field is missing", id="missing training"),
        pytest.param(
            "name: Tiny_Regression\ntraining: {command: [python]}\n",
            "name",
            "lower-case letters",
            id="bad name",
        ),
        pytest.param(
            f"name: {'a' * 49}\ntraining: {{command: [python]}}\n",
            "name",
            "lower-case letters",
            id="name too long",
        ),
        pytest.param(
            "name: a\ntraining: {command: ['python train.py --epochs 3']}\n",
            "training.command",
            "not one shell string",
            id="shell string",
        ),
        pytest.param(
            "name: a\ntraining: {command: [python, '']}\n",
            "training.command[1]",
            "at least 1 character",
            id="empty argv element",
        ),
        pytest.param(
            "name: a\ntraining: {command: []}\n", "training.command", "at least 1 item", id="empty command"
        ),
        pytest.param(
            "name: a\ntraining: {command: [python], env: {SPOTRUN_DATA_DIR: /x}}\n",
            "training.env",
            "SPOTRUN_ variables are set by spotrun",
            id="SPOTRUN_ env var",
        ),
        pytest.param(
            "name: a\ntraining: {command: [python], env: {'MY-VAR': x}}\n",
            "training.env",
            "'MY-VAR' is not a valid environment variable name",
            id="bad env var name",
        ),
        pytest.param(
            minimal_with("data: {inputs: [{source: 'https://bucket.s3.amazonaws.com/x', destination: d}]}\n"),
            "data.inputs[0].source",
            "must be an S3 URI",
            id="bad S3 URI",
        ),
        pytest.param(
            minimal_with("data: {inputs: [{source: 's3://spotrun-data/x', destination: '../etc'}]}\n"),
            "data.inputs[0].destination",
            "without '..'",
            id="dot-dot destination",
        ),
        pytest.param(
            minimal_with("data: {inputs: [{source: 's3://spotrun-data/x', destination: /abs}]}\n"),
            "data.inputs[0].destination",
            "relative path",
            id="absolute destination",
        ),
        pytest.param(
            minimal_with("resources: {gpu_names: [a10g], instance_types: [g5.xlarge]}\n"),
            "resources",
            "either instance_types or gpu_names, not both",
            id="gpu_names and instance_types",
        ),
        pytest.param(
            minimal_with("resources: {instance_types: [g5.xlarge, 'G5 XLarge']}\n"),
            "resources.instance_types",
            "'G5 XLarge' is not an EC2 instance type",
            id="bad instance type",
        ),
        pytest.param(
            minimal_with("resources: {gpu_names: [rtx4090]}\n"),
            "resources.gpu_names[0]",
            "'t4'",
            id="unknown gpu name",
        ),
        pytest.param(
            minimal_with("resources: {gpus_per_node: 0}\n"),
            "resources.gpus_per_node",
            "greater than or equal to 1",
            id="gpus_per_node 0",
        ),
        pytest.param(
            "name: a\ntraining: {command: [python], checkpoint: {signal: SIGKILL}}\n",
            "training.checkpoint.signal",
            "got 'SIGKILL'",
            id="bad signal",
        ),
        pytest.param(
            minimal_with("schedule: {expression: 'cron(0 3 * * *)'}\n"),
            "schedule.expression",
            "is not a schedule expression",
            id="five-field cron",
        ),
        pytest.param(
            minimal_with("schedule: {expression: 'every day'}\n"),
            "schedule.expression",
            "is not a schedule expression",
            id="free-text schedule",
        ),
        pytest.param(
            minimal_with("capacity: {spot: false, on_demand_fallback: true}\n"),
            "capacity",
            "on_demand_fallback needs spot: true",
            id="fallback without spot",
        ),
        pytest.param(
            minimal_with(
                """\
                data:
                  inputs:
                    - {source: 's3://spotrun-data/a/', destination: shared}
                    - {source: 's3://spotrun-data/b/', destination: shared/}
                """
            ),
            "data.inputs",
            "destinations 'shared' and 'shared' overlap",
            id="duplicate destinations",
        ),
        pytest.param(
            minimal_with("tags: {'aws:cloudformation:stack-name': x}\n"),
            "tags",
            "aws: and spotrun: are reserved",
            id="reserved aws tag key",
        ),
        pytest.param(
            minimal_with("tags: {'spotrun:job': x}\n"),
            "tags",
            "aws: and spotrun: are reserved",
            id="reserved spotrun tag key",
        ),
        pytest.param(
            minimal_with("capacity: {max_price_per_hour: 0}\n"),
            "capacity.max_price_per_hour",
            "greater than 0",
            id="zero max price",
        ),
        pytest.param(minimal_with("version: spotrun/v2\n"), "version", "'spotrun/v1'", id="unknown version"),
    ],
)
def test_invalid_manifest_names_the_field(text: str, path: str, fragment: str) -> None:
    # Given a manifest with exactly one problem
    # When it is parsed
    # Then exactly one error line comes back, located at the field and saying what is wrong
    assert_one_error(text, path, fragment)


def test_invalid_yaml_reports_line_and_column() -> None:
    # Given YAML whose flow sequence is never closed on line 3
    text = "name: a\ntraining:\n  command: [python, train.py\n"
    # When it is parsed
    errors = errors_of(text)
    # Then the single error says where the parser stopped
    assert len(errors) == 1
    assert errors[0].startswith("(manifest): not valid YAML or JSON at line ")
    assert ", column " in errors[0]


def test_invalid_json_reports_line_and_column() -> None:
    # Given JSON with a missing closing brace
    text = '{\n  "name": "a",\n  "training": {"command": ["python"]}\n'
    # When it is parsed
    errors = errors_of(text)
    # Then the error is located like a YAML one (JSON is read as YAML)
    assert len(errors) == 1
    assert "not valid YAML or JSON at line 4, column 1" in errors[0]


@pytest.mark.parametrize("text", ["- name: a\n- training: {}\n", "just a string\n", ""])
def test_a_document_that_is_not_a_mapping_is_refused(text: str) -> None:
    # Given a YAML list, a scalar, or an empty document
    # When it is parsed
    errors = errors_of(text)
    # Then the error asks for a mapping of fields
    assert errors == ["(manifest): must be a mapping of fields, such as name: and training:"]


def test_several_errors_are_reported_at_once() -> None:
    # Given a manifest with four independent mistakes
    text = """\
name: Bad Name
resources: {gpus_per_node: 0}
training:
  command: [python, '']
  checkpoint: {signal: SIGSTOP}
"""
    # When it is parsed
    errors = errors_of(text)
    # Then every mistake is reported, each with its own field path, in the model's field order
    paths = [line.partition(": ")[0] for line in errors]
    assert paths == ["name", "resources.gpus_per_node", "training.command[1]", "training.checkpoint.signal"]

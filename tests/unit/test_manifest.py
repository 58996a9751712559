"""Unit tests of spotrun.model.manifest.schema: the job manifest contract, its error messages and its JSON Schema."""

from __future__ import annotations

import json
import textwrap

import pytest
import yaml

from spotrun.model.manifest.parse import ManifestError, manifest_json_schema, parse_manifest_text
from spotrun.model.manifest.schema import MANIFEST_VERSION, JobManifest, StorageClass

MINIMAL = """\
name: tiny-regression
training:
  command: [python, train.py]
"""

FULL_YAML = """\
version: spotrun/v1
name: llama-finetune-7b
resources:
  gpus_per_node: 8
  gpu_memory_gib: 80
  gpu_names: [a100, h100]
  nodes: 1
capacity:
  spot: true
  max_price_per_hour: 40.5
  on_demand_fallback: true
  fallback_after_interruptions: 2
  max_interruptions: 20
  avoid_pool_minutes: 45
data:
  inputs:
    - source: s3://spotrun-data/corpora/wiki/
      destination: wiki
    - source: s3://spotrun-data/tokenizers/llama.json
      destination: tokenizer/llama.json
training:
  code: s3://spotrun-code/llama/
  command: [torchrun, --nproc-per-node, "8", train.py, --epochs, "3"]
  env:
    NCCL_DEBUG: INFO
    HF_HOME: /tmp/hf
  checkpoint:
    interval_steps: 500
    signal: SIGUSR1
    keep_last: 5
  max_runtime_minutes: 2880
  restarts_on_error: 2
outputs:
  model: final/model.safetensors
archive:
  storage_class: DEEP_ARCHIVE
  destination: s3://spotrun-archive/models/
budget:
  max_usd: 2500
schedule:
  expression: cron(0 3 ? * MON *)
  timezone: Europe/Paris
  only_if_data_changed: true
tags:
  team: research
  cost-center: "42"
"""


def minimal_with(extra: str) -> str:
    """The minimal manifest plus more YAML (sections or fields) appended at top level."""
    return MINIMAL + textwrap.dedent(extra)


def errors_of(text: str | bytes) -> list[str]:
    with pytest.raises(ManifestError) as caught:
        parse_manifest_text(text)
    # The exception's text is the same lines joined, so callers can log either.
    assert str(caught.value) == "; ".join(caught.value.errors)
    return caught.value.errors


def assert_one_error(text: str, path: str, fragment: str) -> None:
    errors = errors_of(text)
    assert len(errors) == 1, errors
    location, _, message = errors[0].partition(": ")
    assert location == path, errors
    assert fragment in message, errors


# ----------------------------------------------------------------------------------------------------
# Valid manifests
# ----------------------------------------------------------------------------------------------------


def test_minimal_manifest_gets_every_default() -> None:
    # Given a manifest with only a name and a command
    # When it is parsed
    manifest = parse_manifest_text(MINIMAL)
    # Then every other section holds its documented default
    assert manifest.version == MANIFEST_VERSION == "spotrun/v1"
    assert manifest.name == "tiny-regression"
    assert manifest.training.command == ["python", "train.py"]
    assert manifest.training.code is None
    assert manifest.training.env == {}
    assert manifest.training.max_runtime_minutes == 24 * 60
    assert manifest.training.restarts_on_error == 0
    assert (
        manifest.training.checkpoint.interval_steps,
        manifest.training.checkpoint.signal,
        manifest.training.checkpoint.keep_last,
    ) == (100, "SIGTERM", 3)
    assert (manifest.resources.gpus_per_node, manifest.resources.nodes) == (1, 1)
    assert manifest.resources.gpu_names is None
    assert manifest.resources.instance_types is None
    assert manifest.resources.gpu_memory_gib is None
    assert manifest.capacity.spot is True
    assert manifest.capacity.on_demand_fallback is False
    assert manifest.capacity.max_price_per_hour is None
    assert (
        manifest.capacity.fallback_after_interruptions,
        manifest.capacity.max_interruptions,
        manifest.capacity.avoid_pool_minutes,
    ) == (3, 10, 30)
    assert manifest.data.inputs == []
    assert manifest.outputs.model == "model"
    assert manifest.archive.storage_class is StorageClass.GLACIER
    assert manifest.archive.destination is None
    assert manifest.budget.max_usd is None
    assert manifest.schedule is None
    assert manifest.tags == {}


def test_full_manifest_from_yaml_keeps_every_value() -> None:
    # Given a manifest that sets every section
    # When it is parsed
    manifest = parse_manifest_text(FULL_YAML)
    # Then each value is kept as written
    assert manifest.resources.gpus_per_node == 8
    assert manifest.resources.gpu_memory_gib == 80
    assert manifest.resources.gpu_names == ["a100", "h100"]
    assert manifest.resources.nodes == 1
    assert manifest.capacity.max_price_per_hour == 40.5
    assert manifest.capacity.on_demand_fallback is True
    assert manifest.capacity.fallback_after_interruptions == 2
    assert manifest.capacity.max_interruptions == 20
    assert manifest.capacity.avoid_pool_minutes == 45
    assert [(item.source, item.destination) for item in manifest.data.inputs] == [
        ("s3://spotrun-data/corpora/wiki/", "wiki"),
        ("s3://spotrun-data/tokenizers/llama.json", "tokenizer/llama.json"),
    ]
    assert manifest.training.code == "s3://spotrun-code/llama/"
    assert manifest.training.command == ["torchrun", "--nproc-per-node", "8", "train.py", "--epochs", "3"]
    assert manifest.training.env == {"NCCL_DEBUG": "INFO", "HF_HOME": "/tmp/hf"}
    assert manifest.training.checkpoint.signal == "SIGUSR1"
    assert manifest.training.checkpoint.interval_steps == 500
    assert manifest.training.checkpoint.keep_last == 5
    assert manifest.training.max_runtime_minutes == 2880
    assert manifest.training.restarts_on_error == 2
    assert manifest.outputs.model == "final/model.safetensors"
    assert manifest.archive.storage_class is StorageClass.DEEP_ARCHIVE
    assert manifest.archive.destination == "s3://spotrun-archive/models/"
    assert manifest.budget.max_usd == 2500
    assert manifest.schedule is not None
    assert manifest.schedule.expression == "cron(0 3 ? * MON *)"
    assert manifest.schedule.timezone == "Europe/Paris"
    assert manifest.schedule.only_if_data_changed is True
    assert manifest.tags == {"team": "research", "cost-center": "42"}


def test_full_manifest_from_json_text_equals_the_yaml_one() -> None:
    # Given the same manifest written as JSON
    json_text = json.dumps(yaml.safe_load(FULL_YAML), indent=2)
    assert json_text.lstrip().startswith("{")
    # When both are parsed
    from_json = parse_manifest_text(json_text)
    from_yaml = parse_manifest_text(FULL_YAML)
    # Then the results are identical
    assert from_json == from_yaml


def test_manifest_given_as_bytes() -> None:
    # Given the manifest as the bytes of an S3 object body
    # When it is parsed
    manifest = parse_manifest_text(MINIMAL.encode())
    # Then it reads like text
    assert manifest.name == "tiny-regression"


@pytest.mark.parametrize("storage_class", ["GLACIER", "DEEP_ARCHIVE", "GLACIER_IR"])
def test_every_storage_class_is_accepted(storage_class: str) -> None:
    # Given an archive section with one of the Glacier classes
    text = minimal_with(f"archive: {{storage_class: {storage_class}}}\n")
    # When it is parsed
    manifest = parse_manifest_text(text)
    # Then the class is kept as the enum member
    assert manifest.archive.storage_class is StorageClass(storage_class)
    assert manifest.archive.storage_class == storage_class


def test_unknown_storage_class_is_refused() -> None:
    # Given a storage class S3 has but spotrun does not archive to
    text = minimal_with("archive: {storage_class: STANDARD}\n")
    # When it is parsed
    # Then the field is named
    assert_one_error(text, "archive.storage_class", "GLACIER")


@pytest.mark.parametrize(
    "expression",
    ["cron(0 3 * * ? *)", "cron(15 10 ? * MON-FRI *)", "rate(1 day)", "rate(12 hours)", "rate(30 minutes)"],
)
def test_good_schedule_expressions(expression: str) -> None:
    # Given an EventBridge Scheduler cron (six fields) or rate expression
    text = minimal_with(f"schedule: {{expression: '{expression}'}}\n")
    # When it is parsed
    manifest = parse_manifest_text(text)
    # Then it is kept, with the UTC default time zone
    assert manifest.schedule is not None
    assert manifest.schedule.expression == expression
    assert manifest.schedule.timezone == "UTC"


def test_instance_types_instead_of_gpu_names() -> None:
    # Given an explicit list of instance types
    text = minimal_with("resources: {instance_types: [g5.xlarge, g6.xlarge, p4d.24xlarge]}\n")
    # When it is parsed
    manifest = parse_manifest_text(text)
    # Then the list is kept
    assert manifest.resources.instance_types == ["g5.xlarge", "g6.xlarge", "p4d.24xlarge"]


def test_parsed_manifest_is_immutable() -> None:
    # Given a parsed manifest
    manifest = parse_manifest_text(MINIMAL)
    # When a field is assigned
    # Then it is refused, so a validated manifest stays valid
    with pytest.raises(ValueError, match="frozen"):
        manifest.name = "other"  # type: ignore[misc]


# ----------------------------------------------------------------------------------------------------
# JSON Schema
# ----------------------------------------------------------------------------------------------------


def test_json_schema_is_valid_json_with_required_fields() -> None:
    # Given the schema printed by `spotrun schema`
    # When it is loaded as JSON
    schema = json.loads(manifest_json_schema())
    # Then it declares draft 2020-12, requires name and training, and describes an object
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["type"] == "object"
    assert sorted(schema["required"]) == ["name", "training"]
    assert schema["additionalProperties"] is False


def test_json_schema_mentions_every_top_level_field() -> None:
    # Given the manifest model's fields
    expected = {
        "version",
        "name",
        "resources",
        "capacity",
        "data",
        "training",
        "outputs",
        "archive",
        "budget",
        "schedule",
        "tags",
    }
    assert set(JobManifest.model_fields) == expected
    # When the schema is generated
    schema = json.loads(manifest_json_schema())
    # Then each top-level field is a property, and the nested models are defined
    assert set(schema["properties"]) == expected
    assert {"Resources", "CapacityPolicy", "TrainingSpec", "DataInput", "ArchiveSpec", "Schedule"} <= set(
        schema["$defs"]
    )


def test_json_schema_is_stable_text() -> None:
    # Given two generations of the schema
    # When they are compared
    # Then they are byte-identical (sorted keys), so a checked-in copy diffs cleanly
    assert manifest_json_schema() == manifest_json_schema()
    assert manifest_json_schema().startswith("{\n  ")


@pytest.mark.parametrize(
    ("fragment", "path", "message"),
    [
        pytest.param(
            """
            data:
              inputs:
                - {source: 's3://spotrun-data/a/', destination: d}
                - {source: 's3://spotrun-data/b/', destination: d/sub}
            """,
            "data.inputs",
            "overlap",
            id="nested destinations",
        ),
        pytest.param(
            "capacity: {max_price_per_hour: 0.0005}\n",
            "capacity.max_price_per_hour",
            "greater than 0.001",
            id="price below EC2 minimum",
        ),
        pytest.param(
            "schedule: {expression: rate(0 minutes)}\n",
            "schedule.expression",
            "not a schedule",
            id="rate zero",
        ),
        pytest.param(
            "schedule: {expression: rate(5 minute)}\n",
            "schedule.expression",
            "plural",
            id="rate singular unit",
        ),
        pytest.param("tags: {a: b}\ntags: {c: d}\n", "(manifest)", "appears twice", id="duplicate key"),
    ],
)
def test_stricter_checks(fragment, path, message):
    # Given a manifest with the fragment
    text = minimal_with(textwrap.dedent(fragment))
    # When it is parsed
    with pytest.raises(ManifestError) as raised:
        parse_manifest_text(text)
    # Then the single error names the field and says why
    [error] = raised.value.errors
    assert error.startswith(path + ":"), error
    assert message in error


def test_numbers_and_booleans_in_env_become_text():
    # Given env values YAML reads as a number and a boolean
    manifest = parse_manifest_text(
        minimal_with("").replace("command:", "env: {OMP_NUM_THREADS: 4, DEBUG: true}\n  command:")
    )
    # Then they are the text the process will see
    assert manifest.training.env == {"OMP_NUM_THREADS": "4", "DEBUG": "true"}

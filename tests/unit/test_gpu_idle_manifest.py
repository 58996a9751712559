"""The manifest's training.gpu_idle: its defaults, its refusals (each saying why) and its JSON Schema."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rich.console import Console

from spotrun.cli.plan import plan_view
from spotrun.model.manifest.parse import ManifestError, manifest_json_schema, parse_manifest_document
from tests.unit.test_plan import document, plan_of


def manifest(gpu_idle: Any) -> dict[str, Any]:
    return {"name": "idle", "training": {"command": ["python", "train.py"], "gpu_idle": gpu_idle}}


def test_absent_means_no_policy_and_minutes_alone_takes_the_defaults() -> None:
    # Given a manifest without gpu_idle, and one giving only its minutes
    without = parse_manifest_document({"name": "idle", "training": {"command": ["python", "train.py"]}})
    minutes_only = parse_manifest_document(manifest({"minutes": 15}))
    # Then the first has no policy; the second idles below 10 % for 15 minutes and fails the job
    assert without.training.gpu_idle is None
    policy = minutes_only.training.gpu_idle
    assert policy is not None
    assert (policy.utilization_below, policy.minutes, policy.action) == (10.0, 15.0, "fail")


def test_every_field_can_be_given() -> None:
    policy = parse_manifest_document(
        manifest({"utilization_below": 25.5, "minutes": 0.5, "action": "relaunch"})
    ).training.gpu_idle
    assert policy is not None
    assert (policy.utilization_below, policy.minutes, policy.action) == (25.5, 0.5, "relaunch")


@pytest.mark.parametrize(
    ("gpu_idle", "message"),
    [
        ({}, "training.gpu_idle.minutes: required field is missing"),
        ({"minutes": 0}, "training.gpu_idle.minutes: Input should be greater than 0"),
        ({"minutes": -1}, "training.gpu_idle.minutes: Input should be greater than 0"),
        ({"minutes": "5"}, "training.gpu_idle.minutes: must be a number, not a text"),
        (
            {"minutes": 5, "utilization_below": 0},
            "training.gpu_idle.utilization_below: Input should be greater than 0",
        ),
        (
            {"minutes": 5, "utilization_below": 100.5},
            "training.gpu_idle.utilization_below: Input should be less than or equal to 100",
        ),
        (
            {"minutes": 5, "action": "restart"},
            "training.gpu_idle.action: must be one of ['fail', 'relaunch'], got 'restart'",
        ),
        ({"minutes": 5, "min_utilization": 5}, "training.gpu_idle.min_utilization: unknown field"),
    ],
)
def test_a_bad_policy_is_refused_saying_why(gpu_idle: dict[str, Any], message: str) -> None:
    # When a manifest with a bad gpu_idle is read
    with pytest.raises(ManifestError) as refused:
        parse_manifest_document(manifest(gpu_idle))
    # Then the refusal names the field and the problem
    assert message in str(refused.value)


def test_the_json_schema_states_the_policy() -> None:
    # Given the manifest's published JSON Schema
    schema = json.loads(manifest_json_schema())
    training = schema["$defs"]["TrainingSpec"]["properties"]["gpu_idle"]
    policy = schema["$defs"]["GpuIdlePolicy"]
    # Then gpu_idle is optional (null or the policy), minutes required, the bounds and the actions stated
    assert {"$ref": "#/$defs/GpuIdlePolicy"} in training["anyOf"]
    assert policy["required"] == ["minutes"]
    assert policy["properties"]["minutes"]["exclusiveMinimum"] == 0
    assert policy["properties"]["utilization_below"]["exclusiveMinimum"] == 0
    assert policy["properties"]["utilization_below"]["maximum"] == 100
    assert policy["properties"]["action"]["enum"] == ["fail", "relaunch"]
    assert policy["additionalProperties"] is False


def test_the_plan_states_the_policy_and_spotrun_plan_shows_it() -> None:
    # Given manifests with an idle policy of each action, and one without
    relaunch = plan_of(
        document(training={"command": ["python", "t.py"], "gpu_idle": {"minutes": 20, "action": "relaunch"}})
    )
    fail = plan_of(
        document(
            training={"command": ["python", "t.py"], "gpu_idle": {"minutes": 5, "utilization_below": 30}}
        )
    )
    without = plan_of(document())
    # Then the plan says when a node is idle and what follows, and the CLI prints it
    assert relaunch.gpu_idle == (
        "every GPU of a node below 10 % for 20 min: the idle instance is terminated and the job relaunched from its "
        "last checkpoint"
    )
    assert fail.gpu_idle == "every GPU of a node below 30 % for 5 min: the job fails, its instances released"
    assert without.gpu_idle is None
    console = Console(width=200, record=True)
    console.print(plan_view(fail.model_dump(mode="json")))
    assert "idle policy: every GPU of a node below 30 % for 5 min" in console.export_text()

"""Multi-node manifests: what a group needs (torchrun), and the group options refused on one node."""

from __future__ import annotations

import json

import pytest

from spotrun.model.manifest.parse import ManifestError, manifest_json_schema, parse_manifest_text

TORCHRUN = """\
name: ddp
resources: {nodes: 2}
training:
  command: [torchrun, --nproc-per-node, "1", train.py]
"""

ONE_NODE = """\
name: one
training:
  command: [python, train.py]
"""


def test_a_two_node_torchrun_job_is_accepted_with_the_group_defaults() -> None:
    # Given a manifest asking for two nodes that runs torchrun
    # When it is validated
    manifest = parse_manifest_text(TORCHRUN)
    # Then it keeps two nodes, EFA wanted, 10 minutes for a replacement, and a 30-minute hang bound
    assert manifest.resources.nodes == 2
    assert manifest.resources.efa is True
    assert manifest.capacity.replace_node_minutes == 10
    assert manifest.hang_seconds == 30 * 60


def test_the_module_form_of_torchrun_is_accepted() -> None:
    # Given python -m torch.distributed.run instead of torchrun
    text = TORCHRUN.replace("[torchrun,", "[python3, -m, torch.distributed.run,")
    # When it is validated, Then it is a group's command
    assert parse_manifest_text(text).resources.nodes == 2


def test_several_nodes_without_torchrun_are_refused_saying_why() -> None:
    # Given two nodes running a plain script
    text = TORCHRUN.replace('[torchrun, --nproc-per-node, "1", train.py]', "[python, train.py]")
    # When it is validated, Then the refusal says the command must start torchrun
    with pytest.raises(ManifestError) as caught:
        parse_manifest_text(text)
    assert "must start torchrun" in caught.value.errors[0]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("resources: {efa: false}\n", "resources.efa"),
        ("capacity: {replace_node_minutes: 5}\n", "capacity.replace_node_minutes"),
    ],
)
def test_group_options_are_refused_on_one_node(extra: str, field: str) -> None:
    # Given a one-node manifest with an option only a group uses
    # When it is validated, Then it is refused naming the option (never accepted and ignored)
    with pytest.raises(ManifestError) as caught:
        parse_manifest_text(ONE_NODE + extra)
    assert field in caught.value.errors[0]


def test_a_deadline_is_refused_for_a_group() -> None:
    # Given two nodes with a deadline
    text = (TORCHRUN + "capacity: {deadline: 36h}\n").replace(
        "training:\n", "training:\n  expected_hours: 2\n"
    )
    # When it is validated, Then the deadline is refused for a group
    with pytest.raises(ManifestError) as caught:
        parse_manifest_text(text)
    assert "capacity.deadline is for single-node jobs" in caught.value.errors[0]


def test_hang_minutes_is_the_manifests_when_given_and_none_on_one_node_by_default() -> None:
    # Given one node without hang_minutes, and one with
    plain = parse_manifest_text(ONE_NODE)
    bounded = parse_manifest_text(ONE_NODE.replace("training:\n", "training:\n  hang_minutes: 0.5\n"))
    # Then the first never hangs, the second after 30 s
    assert plain.hang_seconds is None
    assert bounded.hang_seconds == 30.0


def test_the_schema_caps_nodes_at_sixteen() -> None:
    # Given the JSON Schema an editor validates against
    nodes = json.loads(manifest_json_schema())["$defs"]["Resources"]["properties"]["nodes"]
    # Then it caps nodes at 16
    assert nodes["maximum"] == 16


@pytest.mark.parametrize("option", ["--nnodes", "--rdzv-endpoint=10.0.0.1:29400", "--standalone"])
def test_a_group_command_may_not_give_the_options_spotrun_sets(option: str) -> None:
    # Given a two-node torchrun command that sets one of the group's options itself
    text = TORCHRUN.replace(
        '[torchrun, --nproc-per-node, "1"', f'[torchrun, "{option}", --nproc-per-node, "1"'
    )
    # When it is validated, Then it is refused naming the option (it would override spotrun's PET_ value)
    with pytest.raises(ManifestError) as caught:
        parse_manifest_text(text)
    assert option.split("=")[0] in caught.value.errors[0]

"""Unit tests of spotrun.model.capacity.group_launch: a group's launch template, its placement groups and the
EFA environment."""

from __future__ import annotations

import pytest

from spotrun.model.capacity.group_launch import (
    EFA_ENVIRONMENT,
    efa_environment,
    group_launch_template,
    placement_groups,
    uses_efa,
)
from spotrun.model.capacity.pricing import instance_info

PLAIN, EFA = "spotrun-agent", "spotrun-agent-efa"


def template_for(names: list[str], *, nodes: int = 2, efa_wanted: bool = True) -> tuple[str, bool]:
    return group_launch_template(
        [instance_info(name) for name in names],
        nodes=nodes,
        efa_wanted=efa_wanted,
        launch_template_name=PLAIN,
        efa_launch_template_name=EFA,
    )


def test_a_group_of_efa_types_that_wants_efa_gets_the_efa_template() -> None:
    # Given a two-node group over types that all offer an EFA
    # When its template is chosen
    chosen = template_for(["g5.48xlarge", "p4d.24xlarge"])
    # Then it is the EFA template, as the plan's rule says too
    assert chosen == (EFA, True)
    assert uses_efa([instance_info("g5.48xlarge"), instance_info("p4d.24xlarge")], nodes=2, efa_wanted=True)


@pytest.mark.parametrize(
    ("names", "nodes", "efa_wanted"),
    [
        (["g5.48xlarge"], 1, True),  # one node: nobody to talk to
        (["g5.48xlarge"], 2, False),  # the manifest turned it off
        (["g5.48xlarge", "g5.xlarge"], 2, True),  # one candidate without EFA: EC2 would refuse it
        (["g5.xlarge"], 4, True),
    ],
)
def test_otherwise_the_plain_template(names: list[str], nodes: int, efa_wanted: bool) -> None:
    # Given a group that is single, does not want an EFA, or offers a type without one
    # When its template is chosen
    chosen = template_for(names, nodes=nodes, efa_wanted=efa_wanted)
    # Then it is the plain template, as the plan's rule says too
    assert chosen == (PLAIN, False)
    assert not uses_efa([instance_info(name) for name in names], nodes=nodes, efa_wanted=efa_wanted)


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"candidates": []}, "no candidate"),
        ({"nodes": 0}, "at least 1"),
        ({"efa_launch_template_name": ""}, "efa_launch_template_name"),
    ],
)
def test_impossible_choices_are_refused(arguments: dict[str, object], match: str) -> None:
    # Given arguments no template can be chosen from (or an EFA group in a deployment without the EFA template)
    values: dict[str, object] = {
        "candidates": [instance_info("p5.48xlarge")],
        "nodes": 2,
        "efa_wanted": True,
        "launch_template_name": PLAIN,
        "efa_launch_template_name": EFA,
        **arguments,
    }
    candidates = values.pop("candidates")
    # When it is chosen
    # Then a ValueError says what is wrong
    with pytest.raises(ValueError, match=match):
        group_launch_template(candidates, **values)  # type: ignore[arg-type]


def test_placement_groups_pair_subnets_and_groups_in_order() -> None:
    # Given the two settings, one group per subnet in the subnets' order
    # When they are paired
    paired = placement_groups(("subnet-a", "subnet-b"), ("pg-a", "pg-b"))
    # Then each subnet has its own group
    assert paired == {"subnet-a": "pg-a", "subnet-b": "pg-b"}


def test_placement_groups_of_another_length_are_refused() -> None:
    # Given a deployment whose settings list fewer groups than subnets
    # When they are paired
    # Then the mismatch is named rather than a subnet left without a group
    with pytest.raises(ValueError, match="1 placement groups for 2 subnets"):
        placement_groups(("subnet-a", "subnet-b"), ("pg-a",))


def test_efa_environment_selects_the_efa_provider_everywhere_and_rdma_where_it_exists() -> None:
    # Given a type with GPUDirect RDMA over EFA and one without
    # When their environments are built
    p4d, g5 = efa_environment("p4d.24xlarge"), efa_environment("g5.48xlarge")
    # Then both select libfabric's EFA provider, and only the first turns device RDMA on
    assert p4d["FI_PROVIDER"] == g5["FI_PROVIDER"] == "efa"
    assert p4d["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert "FI_EFA_USE_DEVICE_RDMA" not in g5
    assert g5 == dict(EFA_ENVIRONMENT)

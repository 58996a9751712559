"""Unit tests of the launch settings of spotrun.aws.settings: the placement groups and the EFA launch template."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from spotrun.aws.settings import MissingSettings, Settings
from spotrun.shape import SHAPE

LAUNCH_ENV = {
    "SPOTRUN_JOBS_TABLE": "jobs",
    "SPOTRUN_EVENT_BUS_NAME": "",
    "SPOTRUN_SUBNET_IDS": "subnet-a,subnet-b",
    "SPOTRUN_PLACEMENT_GROUP_NAMES": "pg-a,pg-b",
    "SPOTRUN_LAUNCH_TEMPLATE_NAME": "spotrun-agent",
    "SPOTRUN_EFA_LAUNCH_TEMPLATE_NAME": "spotrun-agent-efa",
}


def test_placement_groups_are_read_as_a_comma_separated_list_in_subnet_order() -> None:
    # Given the acquire function's declared settings in its environment
    names = SHAPE.function("acquire").settings
    # When they are read
    settings = Settings.for_function("acquire", names, LAUNCH_ENV)
    # Then the groups come as a tuple in the order of the subnets, with the EFA template beside the plain one
    assert settings.subnet_ids == ("subnet-a", "subnet-b")
    assert settings.placement_group_names == ("pg-a", "pg-b")
    assert settings.efa_launch_template_name == "spotrun-agent-efa"
    # ...and they are written back the same way
    env = settings.to_env()
    assert env["SPOTRUN_PLACEMENT_GROUP_NAMES"] == "pg-a,pg-b"
    assert env["SPOTRUN_EFA_LAUNCH_TEMPLATE_NAME"] == "spotrun-agent-efa"


@pytest.mark.parametrize("function", ["acquire", "ec2_events"])
def test_the_functions_that_launch_groups_declare_both(function: str) -> None:
    # Given the shape's declaration of a function that launches capacity for a group
    names = SHAPE.function(function).settings
    # When its launch settings are looked at
    # Then it reads the placement groups and the EFA template with the subnets and the plain template
    assert {"subnet_ids", "placement_group_names", "launch_template_name", "efa_launch_template_name"} <= set(
        names
    )


@pytest.mark.parametrize("variable", ["SPOTRUN_PLACEMENT_GROUP_NAMES", "SPOTRUN_EFA_LAUNCH_TEMPLATE_NAME"])
def test_an_empty_launch_setting_is_missing(variable: str) -> None:
    # Given an environment whose placement groups or EFA template are empty (a deployment from before them)
    env = {**LAUNCH_ENV, variable: ""}
    # When acquire's settings are read
    # Then it fails naming the variable: an empty value means nothing here
    with pytest.raises(MissingSettings, match=variable):
        Settings.for_function("acquire", SHAPE.function("acquire").settings, env)


def test_a_placement_group_count_other_than_the_subnets_is_refused() -> None:
    # Given three subnets and two placement groups
    # When settings are built
    # Then they are refused: a subnet would have no group
    with pytest.raises(ValidationError, match="2 placement groups for 3 subnets"):
        Settings(subnet_ids=("a", "b", "c"), placement_group_names=("pg-a", "pg-b"))

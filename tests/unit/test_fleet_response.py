"""Unit tests of spotrun.model.capacity.fleet_request: what a CreateFleet response means (launches, errors, moto)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from moto import mock_aws

from spotrun.model.capacity.candidates import Pool
from spotrun.model.capacity.fleet_request import (
    FleetLaunchError,
    LaunchedInstance,
    fleet_errors,
    parse_fleet_response,
)
from spotrun.model.errors import CapacityUnavailable
from tests.unit.test_fleet_request import SUBNETS, request_for


def aws_instance(
    instance_type: str,
    subnet_id: str,
    ids: list[str],
    *,
    zone: str | None = None,
    lifecycle: str | None = "spot",
) -> dict[str, Any]:
    """One entry of CreateFleet's Instances, shaped as in botocore's service model."""
    overrides: dict[str, Any] = {"InstanceType": instance_type, "SubnetId": subnet_id}
    entry: dict[str, Any] = {
        "LaunchTemplateAndOverrides": {
            "LaunchTemplateSpecification": {"LaunchTemplateName": "spotrun-gpu", "Version": "3"},
            "Overrides": overrides,
        },
        "InstanceIds": ids,
        "InstanceType": instance_type,
    }
    if lifecycle:
        entry["Lifecycle"] = lifecycle
    if zone:
        entry["AvailabilityZone"] = zone
        entry["SubnetId"] = subnet_id
    return entry


def aws_error(
    code: str, instance_type: str | None, subnet_id: str | None, message: str = ""
) -> dict[str, Any]:
    entry: dict[str, Any] = {"ErrorCode": code, "ErrorMessage": message, "Lifecycle": "spot"}
    if instance_type:
        entry["LaunchTemplateAndOverrides"] = {
            "LaunchTemplateSpecification": {"LaunchTemplateName": "spotrun-gpu", "Version": "3"},
            "Overrides": {"InstanceType": instance_type, "SubnetId": subnet_id},
        }
    return entry


def test_launched_instance_is_read_with_its_zone() -> None:
    # Given a response where AWS names the zone and subnet of the instance
    response = {
        "FleetId": "fleet-1",
        "Instances": [aws_instance("g5.xlarge", "subnet-bbb", ["i-1"], zone="us-east-1b")],
        "Errors": [],
    }
    # When it is parsed
    launched = parse_fleet_response(response, SUBNETS)
    # Then the instance, its pool and its lifecycle come back
    assert launched == [LaunchedInstance("i-1", "g5.xlarge", "us-east-1b", "spot", "subnet-bbb")]
    assert launched[0].pool == ("g5.xlarge", "us-east-1b")


def test_zone_is_found_through_the_subnet_when_aws_omits_it() -> None:
    # Given a response that names only the subnet (as moto does)
    response = {"Instances": [aws_instance("g6.xlarge", "subnet-aaa", ["i-1"])]}
    # When it is parsed
    launched = parse_fleet_response(response, SUBNETS)
    # Then the zone comes from the subnets mapping
    assert launched[0].availability_zone == "us-east-1a"
    assert launched[0].subnet_id == "subnet-aaa"


def test_every_instance_id_of_an_entry_is_returned() -> None:
    # Given a multi-node launch reported as one entry with three ids
    response = {
        "Instances": [
            aws_instance("p4d.24xlarge", "subnet-aaa", ["i-1", "i-2", "i-3"], lifecycle="on-demand")
        ]
    }
    # When it is parsed
    launched = parse_fleet_response(response, SUBNETS)
    # Then there is one LaunchedInstance per id
    assert [instance.instance_id for instance in launched] == ["i-1", "i-2", "i-3"]
    assert {instance.lifecycle for instance in launched} == {"on-demand"}


def test_errors_of_other_pools_do_not_hide_a_launch() -> None:
    # Given one pool failed and another launched
    response = {
        "Instances": [aws_instance("g5.xlarge", "subnet-bbb", ["i-1"])],
        "Errors": [aws_error("InsufficientInstanceCapacity", "g6.xlarge", "subnet-aaa")],
    }
    # When it is parsed
    launched = parse_fleet_response(response, SUBNETS)
    # Then the launched instance is returned
    assert [instance.instance_id for instance in launched] == ["i-1"]


def test_missing_lifecycle_falls_back_to_the_requested_one() -> None:
    # Given an entry without Lifecycle
    response = {"Instances": [aws_instance("g5.xlarge", "subnet-aaa", ["i-1"], lifecycle=None)]}
    # When it is parsed, saying on-demand was requested
    launched = parse_fleet_response(response, SUBNETS, requested_lifecycle="on-demand")
    # Then the instance is recorded as on-demand
    assert launched[0].lifecycle == "on-demand"


def test_missing_lifecycle_without_a_fallback_is_an_error() -> None:
    # Given an entry without Lifecycle and no requested lifecycle
    response = {"Instances": [aws_instance("g5.xlarge", "subnet-aaa", ["i-1"], lifecycle=None)]}
    # When it is parsed
    # Then the instance id is named rather than a lifecycle guessed (it decides the cost)
    with pytest.raises(ValueError, match="i-1"):
        parse_fleet_response(response, SUBNETS)


def test_an_unknown_subnet_is_an_error_naming_the_instance() -> None:
    # Given an instance in a subnet missing from the mapping, with no zone in the response
    response = {"Instances": [aws_instance("g5.xlarge", "subnet-other", ["i-9"])]}
    # When it is parsed
    # Then the error names the instance and the subnet
    with pytest.raises(ValueError, match=r"i-9.*subnet-other"):
        parse_fleet_response(response, SUBNETS)


def test_no_instance_raises_capacity_unavailable_with_codes_and_pools() -> None:
    # Given every pool failed
    response = {
        "FleetId": "fleet-1",
        "Instances": [],
        "Errors": [
            aws_error(
                "InsufficientInstanceCapacity",
                "g5.xlarge",
                "subnet-aaa",
                "There is no Spot capacity available that matches your request.",
            ),
            aws_error("InsufficientInstanceCapacity", "g5.xlarge", "subnet-bbb"),
            aws_error("SpotMaxPriceTooLow", "g6.xlarge", "subnet-aaa"),
        ],
    }
    # When it is parsed
    with pytest.raises(CapacityUnavailable) as caught:
        parse_fleet_response(response, SUBNETS)
    # Then the message groups pools by code and keeps AWS's explanation, under the ASL error name
    message = str(caught.value)
    assert "InsufficientInstanceCapacity in g5.xlarge/us-east-1a, g5.xlarge/us-east-1b" in message
    assert "There is no Spot capacity available" in message
    assert "SpotMaxPriceTooLow in g6.xlarge/us-east-1a" in message
    assert type(caught.value).__name__ == "Capacity.Unavailable"


def test_an_empty_response_is_capacity_unavailable() -> None:
    # Given a response with neither instances nor errors
    # When it is parsed
    # Then it still fails loudly
    with pytest.raises(CapacityUnavailable, match="no instance and no error"):
        parse_fleet_response({"FleetId": "fleet-1"}, SUBNETS)


def test_fleet_errors_are_classified() -> None:
    # Given a capacity error with a pool and a configuration error without one
    response = {
        "Errors": [
            aws_error("InsufficientInstanceCapacity", "g5.xlarge", "subnet-bbb", "no capacity"),
            aws_error("InvalidLaunchTemplateName.NotFoundException", None, None, "not found"),
        ]
    }
    # When the errors are read
    errors = fleet_errors(response, SUBNETS)
    # Then each has its pool (when known) and whether waiting could help
    assert errors == [
        FleetLaunchError(
            "InsufficientInstanceCapacity", "no capacity", Pool("g5.xlarge", "us-east-1b"), "spot"
        ),
        FleetLaunchError("InvalidLaunchTemplateName.NotFoundException", "not found", None, "spot"),
    ]
    assert [error.kind for error in errors] == ["capacity", "configuration"]


def test_request_and_response_round_trip_through_moto() -> None:
    # Given an emulated account with two subnets and a launch template
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        vpc_id = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        subnets = {
            ec2.create_subnet(VpcId=vpc_id, CidrBlock=f"10.0.{index}.0/24", AvailabilityZone=zone)["Subnet"][
                "SubnetId"
            ]: zone
            for index, zone in enumerate(("us-east-1a", "us-east-1b"))
        }
        ec2.create_launch_template(
            LaunchTemplateName="spotrun-gpu", LaunchTemplateData={"ImageId": "ami-12c6146b"}
        )
        request = request_for(subnets=subnets, nodes=2, tags={"spotrun:job": "job-1"})
        # When the fleet is created and its response parsed
        launched = parse_fleet_response(ec2.create_fleet(**request), subnets)
        # Then two spot instances of one candidate type exist, tagged, in the subnet's zone
        assert len(launched) == 2
        assert {instance.lifecycle for instance in launched} == {"spot"}
        assert {instance.instance_type for instance in launched} <= {"g6.xlarge", "g5.xlarge"}
        described = ec2.describe_instances(InstanceIds=[instance.instance_id for instance in launched])
        for reservation in described["Reservations"]:
            for instance in reservation["Instances"]:
                assert {"Key": "spotrun:job", "Value": "job-1"} in instance["Tags"]
                ours = next(item for item in launched if item.instance_id == instance["InstanceId"])
                assert instance["Placement"]["AvailabilityZone"] == ours.availability_zone

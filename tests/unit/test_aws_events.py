"""spotrun.aws.events: the EventBridge events the functions take, read from the documented sample events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from spotrun.aws.events import Ec2InstanceEvent, S3ObjectEvent

EVENTS = Path(__file__).resolve().parent.parent / "events"


def sample(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


def test_an_s3_object_created_event_reads_its_bucket_object_and_envelope():
    # Given S3's Object Created event as EventBridge delivers it
    # When it is parsed
    event = S3ObjectEvent.model_validate(sample("s3-object-created.json"))
    # Then the bucket, the object and the envelope are read
    assert (event.detail.bucket.name, event.detail.object.key) == (
        "spotrun-jobs-local",
        "manifests/tiny-regression.yaml",
    )
    assert (event.detail.object.size, event.detail.object.etag) == (187, "b1946ac92492d2347c6235b4d2611184")
    assert (event.detail_type, event.region, event.source) == ("Object Created", "us-east-1", "aws.s3")


@pytest.mark.parametrize(
    "name",
    [
        "ec2-spot-interruption-warning.json",
        "ec2-rebalance-recommendation.json",
        "ec2-state-change-running.json",
        "ec2-state-change-terminated.json",
    ],
)
def test_each_ec2_instance_event_reads_its_instance_and_region(name):
    # Given one of EC2's instance events
    # When it is parsed
    event = Ec2InstanceEvent.model_validate(sample(name))
    # Then the instance and the envelope's region (never the ARN's zone) are read
    assert event.detail.instance_id == "i-0123456789abcdef0"
    assert event.region == "us-east-1"


@pytest.mark.parametrize(
    ("drop", "where"),
    [
        (("account",), "account"),
        (("time",), "time"),
        (("resources",), "resources"),
        (("detail", "request-id"), "request-id"),
        (("detail", "requester"), "requester"),
        (("detail", "object", "key"), "key"),
    ],
)
def test_an_s3_event_without_a_field_aws_always_sends_is_refused(drop, where):
    # Given the sample S3 event without one of the fields EventBridge or S3 always send
    event = sample("s3-object-created.json")
    container = event
    for part in drop[:-1]:
        container = container[part]
    del container[drop[-1]]
    # When it is parsed, Then it is refused, naming the field
    with pytest.raises(ValidationError, match=where):
        S3ObjectEvent.model_validate(event)


def test_an_s3_event_with_a_negative_size_is_refused():
    # Given the sample S3 event with a negative object size
    event = sample("s3-object-created.json")
    event["detail"]["object"]["size"] = -1
    # When it is parsed, Then it is refused
    with pytest.raises(ValidationError, match="size"):
        S3ObjectEvent.model_validate(event)


def test_an_ec2_event_of_another_kind_is_refused():
    # Given an EC2 event of a kind spotrun does not act on
    event = sample("ec2-state-change-running.json")
    event["detail-type"] = "EC2 AMI State Change"
    # When it is parsed, Then it is refused
    with pytest.raises(ValidationError, match="detail-type"):
        Ec2InstanceEvent.model_validate(event)

"""The emulator's API destination delivery: which answers are retried, how long, and where the rest go."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from spotrun.local.notifications.targets import deliver_to_api_destination
from tests.integration.webhook_receiver import Receiver, webhook_receiver

ACCOUNT, REGION = "123456789012", "us-east-1"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with webhook_receiver() as started:
        yield started


@pytest.fixture
def destination(receiver: Receiver) -> Iterator[dict[str, str]]:
    with mock_aws():
        events = boto3.client("events", region_name=REGION)
        connection = events.create_connection(
            Name="c",
            AuthorizationType="BASIC",
            AuthParameters={"BasicAuthParameters": {"Username": "u", "Password": "p"}},
        )["ConnectionArn"]
        arn = events.create_api_destination(
            Name="d", ConnectionArn=connection, InvocationEndpoint=receiver.url, HttpMethod="PUT"
        )["ApiDestinationArn"]
        sqs = boto3.client("sqs", region_name=REGION)
        queue = sqs.create_queue(QueueName="dlq")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        yield {"arn": arn, "queue": queue, "queue_arn": queue_arn}


class Clock:
    """A clock that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def deliver(destination: dict[str, str], clock: Clock, **policy: int) -> Any:
    target = {"Id": "t", "Arn": destination["arn"], "DeadLetterConfig": {"Arn": destination["queue_arn"]}}
    if policy:
        target["RetryPolicy"] = policy
    return deliver_to_api_destination(
        ACCOUNT,
        REGION,
        "arn:rule",
        target,
        {"text": "hi"},
        clock.now,
        sleep=clock.sleep,
        now=lambda: clock.now,
    )


def dead_letters(destination: dict[str, str]) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs", region_name=REGION)
    return sqs.receive_message(QueueUrl=destination["queue"], MessageAttributeNames=["All"]).get(
        "Messages", []
    )


def test_a_throttled_then_failing_endpoint_is_retried_with_a_growing_back_off(receiver, destination) -> None:
    # Given an endpoint that answers 429, then 502, then 200
    receiver.answers += [429, 502]
    clock = Clock()

    # When an event is delivered
    outcome = deliver(destination, clock)

    # Then the third call delivered it, after back-offs of 1 s then 2 s; each call carried the body and the
    # connection's basic authorization with the destination's method
    assert (outcome.delivered, outcome.attempts) == (True, 3)
    assert clock.sleeps == [1.0, 2.0]
    assert [r.method for r in receiver.requests] == ["PUT"] * 3
    assert all(r.json() == {"text": "hi"} for r in receiver.requests)
    assert receiver.requests[0].headers["Authorization"] == "Basic dTpw"
    assert not dead_letters(destination)


def test_retries_stop_at_the_policys_attempts_and_the_event_goes_to_the_dead_letter_queue(
    receiver, destination
) -> None:
    # Given an endpoint that always fails, and a policy of two retries
    receiver.answers += [500] * 10
    clock = Clock()

    # When an event is delivered
    outcome = deliver(destination, clock, MaximumRetryAttempts=2)

    # Then it was tried three times, and the dead-letter queue holds it with the error
    assert (outcome.delivered, outcome.attempts) == (False, 3)
    assert len(receiver.requests) == 3
    (message,) = dead_letters(destination)
    assert json.loads(message["Body"]) == {"text": "hi"}
    assert message["MessageAttributes"]["ERROR_CODE"]["StringValue"] == "SDK_SERVER_ERROR"
    assert message["MessageAttributes"]["ERROR_MESSAGE"]["StringValue"] == "HTTP 500"
    assert message["MessageAttributes"]["RULE_ARN"]["StringValue"] == "arn:rule"


def test_retries_stop_once_the_event_is_older_than_the_policys_age(receiver, destination) -> None:
    # Given an endpoint that always fails, and events kept for 60 s at most
    receiver.answers += [503] * 20
    clock = Clock()

    # When an event is delivered
    outcome = deliver(destination, clock, MaximumRetryAttempts=185, MaximumEventAgeInSeconds=60)

    # Then no retry was made past the 60 s (back-offs 1+2+4+8+16 = 31 s; the next, 32 s, would pass it)
    assert not outcome.delivered
    assert clock.sleeps == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert len(dead_letters(destination)) == 1


def test_a_client_error_is_not_retried(receiver, destination) -> None:
    receiver.answers.append(404)
    outcome = deliver(destination, Clock())
    assert (outcome.delivered, outcome.attempts, outcome.error_message) == (False, 1, "HTTP 404")

"""The deployer's notification subscriptions, created in the emulator as the CDK app creates them on AWS.

One rule per subscription on the notifications bus (:func:`spotrun.notifications.notification_rules`), to an SNS
topic with an e-mail subscription or to an API destination, with the message transformer, the retry policy and
the dead-letter queue of :mod:`spotrun.notifications`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spotrun.notifications import (
    DEFAULT_AUTH_HEADER,
    DEFAULT_AUTH_VALUE,
    NOTIFY_DLQ_NAME,
    RETRY_POLICY,
    WEBHOOK_SECRET_KEY,
    Subscription,
    message_transformer,
    notification_rules,
)

ClientFactory = Callable[[str], Any]


@dataclass
class NotificationResources:
    """What :func:`create_subscriptions` created."""

    # Notification rule (logical, "notify-1-email") -> its target's ARN (a topic or an API destination).
    targets: dict[str, str] = field(default_factory=dict)
    dlq_url: str = ""


def _webhook(client: ClientFactory, subscription: Subscription) -> tuple[str, str, str]:
    """The URL, header and header value of a webhook subscription (a secret's are read as CloudFormation would)."""
    header = subscription.header or DEFAULT_AUTH_HEADER
    if subscription.webhook is not None:
        token = subscription.token.get_secret_value() if subscription.token else DEFAULT_AUTH_VALUE
        return subscription.webhook.get_secret_value(), header, token
    secret = json.loads(
        client("secretsmanager").get_secret_value(SecretId=subscription.webhook_secret)["SecretString"]
    )
    return secret[WEBHOOK_SECRET_KEY], header, secret["token"] if subscription.header else DEFAULT_AUTH_VALUE


def create_subscriptions(
    client: ClientFactory,
    subscriptions: Sequence[Subscription],
    bus: str,
    role_arn: str,
    name: Callable[[str], str],
) -> NotificationResources:
    """One rule per subscription on the notifications bus, to an SNS topic (e-mail) or an API destination.

    Parameters
    ----------
    client
        ``service name -> boto3 client`` on the emulator's endpoint.
    subscriptions
        The deployer's subscriptions; none: nothing is created, not even the dead-letter queue.
    bus
        The deployed name of the notifications bus.
    role_arn
        The role EventBridge invokes an API destination with.
    name
        Deployed name of a logical resource name (the rules', topics', destinations' and the dead-letter queue's).

    Returns
    -------
    NotificationResources
        Each rule's target ARN and the dead-letter queue's URL (empty without subscriptions).
    """
    created = NotificationResources()
    if not subscriptions:
        return created
    events = client("events")
    sqs = client("sqs")
    created.dlq_url = sqs.create_queue(QueueName=name(NOTIFY_DLQ_NAME))["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=created.dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    for spec in notification_rules(subscriptions):
        rule = name(spec.name)
        subscription = spec.subscription
        if subscription.email is not None:
            arn = client("sns").create_topic(Name=rule)["TopicArn"]
            client("sns").subscribe(TopicArn=arn, Protocol="email", Endpoint=subscription.email)
        else:
            url, header, token = _webhook(client, subscription)
            connection = events.create_connection(
                Name=rule,
                AuthorizationType="API_KEY",
                AuthParameters={"ApiKeyAuthParameters": {"ApiKeyName": header, "ApiKeyValue": token}},
            )["ConnectionArn"]
            arn = events.create_api_destination(
                Name=rule, ConnectionArn=connection, InvocationEndpoint=url, HttpMethod="POST"
            )["ApiDestinationArn"]
        events.put_rule(
            Name=rule,
            EventBusName=bus,
            EventPattern=json.dumps(spec.pattern),
            State="ENABLED",
            Description=spec.description,
        )
        transformer = message_transformer(subscription.kind)
        target: dict[str, Any] = {
            "Id": "subscriber",
            "Arn": arn,
            "InputTransformer": {"InputPathsMap": transformer.paths, "InputTemplate": transformer.template},
            "RetryPolicy": dict(RETRY_POLICY),
            "DeadLetterConfig": {"Arn": dlq_arn},
        }
        if subscription.email is None:
            target["RoleArn"] = role_arn  # EventBridge invokes an API destination with a role
        events.put_targets(Rule=rule, EventBusName=bus, Targets=[target])
        created.targets[spec.name] = arn
    return created

"""The deployer's notification subscriptions: one rule per subscriber on spotrun's bus, to SNS or an API destination.

Built from :func:`spotrun.notifications.notification_rules`, as the emulator's provisioning is. An e-mail subscriber
gets a topic of its own (KMS-encrypted with a key that EventBridge may use, TLS-only) with one e-mail
subscription; a webhook an EventBridge connection and API destination, whose URL CloudFormation resolves from the
deployer's Secrets Manager secret at deploy time (a dynamic reference,
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/dynamic-references-secretsmanager.html), so the
template, the outputs and the assembly never hold it. Every target retries for an hour and then sends the event to
one encrypted dead-letter queue.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import CfnResource, Duration, SecretValue
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.nag import acknowledge
from infra.shape_tags import mark
from spotrun.model.job.bus_events import SOURCE
from spotrun.notifications import (
    DEFAULT_AUTH_HEADER,
    DEFAULT_AUTH_VALUE,
    RETRY_POLICY,
    WEBHOOK_SECRET_KEY,
    NotificationRule,
    Subscription,
    message_transformer,
    notification_rules,
)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-"))


class Notifications(Construct):
    """Every subscriber's rule and target, and what they share (a topic key, a dead-letter queue).

    Attributes
    ----------
    rules
        Rule name (``notify-1-email``) -> rule.
    dead_letters
        The queue undeliverable notifications go to; None without subscribers.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        subscribers: Sequence[Subscription],
        bus: events.IEventBus,
    ):
        super().__init__(scope, construct_id)
        self.rules: dict[str, events.Rule] = {}
        self.dead_letters: sqs.Queue | None = None
        specs = notification_rules(subscribers)
        if not specs:
            return
        self.dead_letters = sqs.Queue(
            self,
            "DeadLetters",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        acknowledge(
            self.dead_letters,
            "AwsSolutions-SQS3",
            "This queue is the dead-letter queue of the notification rules' targets (an EventBridge DLQ, which "
            "cdk-nag does not recognise as one).",
        )
        # EventBridge publishes to the encrypted topics through a role of each rule's own (authorize_using_role),
        # which may publish to its topic and use this key for it, rather than through a topic policy open to the
        # service (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-use-identity-based.html).
        key = (
            kms.Key(self, "TopicKey", enable_key_rotation=True, description="spotrun notification topics")
            if any(spec.subscription.email is not None for spec in specs)
            else None
        )
        for spec in specs:
            self.rules[spec.name] = self._rule(spec, bus, key)

    def _rule(self, spec: NotificationRule, bus: events.IEventBus, key: kms.IKey | None) -> events.Rule:
        name = _camel(spec.name)
        rule = events.Rule(
            self,
            name,
            event_bus=bus,
            description=spec.description,
            # Replaced below by the whole pattern: CDK's EventPattern has no "$or".
            event_pattern=events.EventPattern(source=[SOURCE]),
        )
        cfn_rule = rule.node.default_child
        assert isinstance(cfn_rule, CfnResource)
        cfn_rule.add_property_override("EventPattern", spec.pattern)
        subscription = spec.subscription
        dead_letters = self.dead_letters
        retries = RETRY_POLICY["MaximumRetryAttempts"]
        max_age = Duration.seconds(RETRY_POLICY["MaximumEventAgeInSeconds"])
        placeholder = events.RuleTargetInput.from_text("replaced by the input transformer below")
        target: events.IRuleTarget
        if subscription.email is not None:
            topic = sns.Topic(
                self, f"{name}Topic", display_name="spotrun notifications", master_key=key, enforce_ssl=True
            )
            # The message is the transformer's text, not SNS's JSON envelope.
            topic.add_subscription(subscriptions.EmailSubscription(subscription.email))
            target = targets.SnsTopic(
                topic,
                message=placeholder,
                authorize_using_role=True,
                dead_letter_queue=dead_letters,
                retry_attempts=retries,
                max_event_age=max_age,
            )
            acknowledge(
                rule,
                "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
                "The rule's role publishes to its encrypted topic: GenerateDataKey* (GenerateDataKey and "
                "GenerateDataKeyWithoutPlaintext) on the topic's key alone, as SNS needs to encrypt a message.",
            )
        else:
            target = targets.ApiDestination(
                self._destination(name, subscription),
                event=placeholder,
                dead_letter_queue=dead_letters,
                retry_attempts=retries,
                max_event_age=max_age,
            )
        rule.add_target(target)
        transformer = message_transformer(subscription.kind)
        cfn_rule.add_property_deletion_override("Targets.0.Input")
        cfn_rule.add_property_override(
            "Targets.0.InputTransformer",
            {"InputPathsMap": transformer.paths, "InputTemplate": transformer.template},
        )
        mark(rule, "notification", spec.name)
        return rule

    def _destination(self, name: str, subscription: Subscription) -> events.ApiDestination:
        secret = subscription.webhook_secret
        assert secret is not None  # StackOptions admits no other webhook
        value = (
            SecretValue.secrets_manager(secret, json_field="token")
            if subscription.header
            # A constant naming the sender: not a secret, and Slack's URL needs no header.
            else SecretValue.unsafe_plain_text(DEFAULT_AUTH_VALUE)
        )
        connection = events.Connection(
            self,
            f"{name}Connection",
            authorization=events.Authorization.api_key(subscription.header or DEFAULT_AUTH_HEADER, value),
            description="spotrun notifications webhook",
        )
        return events.ApiDestination(
            self,
            f"{name}Destination",
            connection=connection,
            # Resolved by CloudFormation at deploy time; the template holds the secret's name only. EventBridge
            # keeps the URL as the destination's InvocationEndpoint, which DescribeApiDestination shows to whoever
            # may call it (docs/guides/notifications.md).
            endpoint=SecretValue.secrets_manager(secret, json_field=WEBHOOK_SECRET_KEY).unsafe_unwrap(),
            http_method=events.HttpMethod.POST,
            description="spotrun notifications webhook",
        )

"""Notifications: who hears of which jobs' events, declared once for the CDK app and the emulator.

A deployer subscribes an e-mail address or a webhook (Slack-style: a POST of ``{"text": "..."}``) to some kinds
of event of every job, or of the jobs whose name starts with a prefix. Each subscription becomes one EventBridge
rule on the deployment's bus (:attr:`spotrun.shape.DeploymentShape.notifications_bus`) whose pattern
(:func:`subscription_pattern`) matches exactly its kinds, so an event that is of two kinds (a budget failure also
ends the job) is delivered once. The rule's one target is an SNS topic with an e-mail subscription, or an
EventBridge API destination; an input transformer turns the event into the message (:func:`message_transformer`).
``infra/constructs/notifications.py`` and :mod:`spotrun.local.notifications.subscriptions` both build from
:func:`notification_rules`.

Kinds (:class:`NotificationKind`): ``ended`` (the job reached a terminal status), ``interrupted`` (its capacity
was reclaimed; spotrun resumes it), ``budget`` (it failed with ``Budget.Exceeded``), ``deadline`` (a deadline job's
policy changed how it runs it: spot, on-demand, wait).

A webhook's URL is a secret (a Slack URL carries its token): the model holds it as a :class:`~pydantic.SecretStr`,
so no repr, log or record shows it. On AWS it is never given as such: the deployer names a Secrets Manager secret
holding it (``webhook_secret``) and CloudFormation resolves it at deploy time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any, NamedTuple

from pydantic import Field, SecretStr, field_validator, model_validator

from spotrun.model.base import DeferredModel
from spotrun.model.job.bus_events import DEADLINE_DECISION, SOURCE, STATUS_CHANGE
from spotrun.model.job.record import TERMINAL_STATUSES, JobStatus
from spotrun.model.manifest.rules import NAME

BUDGET_EXCEEDED = "Budget.Exceeded"
# SNS's e-mail protocol takes an address; this is the shape SNS accepts, not a full RFC 5322 parser.
_EMAIL = re.compile(r"^[^@\s,]+@[^@\s,]+\.[^@\s,]+$")
_URL = re.compile(r"^https?://[^\s]+$")
# The JSON key of the URL inside a ``webhook_secret`` secret (a JSON SecretString).
WEBHOOK_SECRET_KEY = "url"  # noqa: S105 (a key's name, not a secret)
# The header an API destination's connection sends (EventBridge connections always authorize: API key, basic or
# OAuth, https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-target-connection.html). A Slack URL needs
# none, so a subscription without ``header`` sends this one with a constant value, which names the sender.
DEFAULT_AUTH_HEADER = "X-Spotrun-Notification"
DEFAULT_AUTH_VALUE = "spotrun"
# Every subscriber's target: retried for an hour at most (a notification older than that is stale news), then
# sent to one dead-letter queue (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-retry-policy.html).
RETRY_POLICY = {"MaximumRetryAttempts": 30, "MaximumEventAgeInSeconds": 3600}
NOTIFY_DLQ_NAME = "notify-dlq"


class NotificationKind(StrEnum):
    """Which events of a job a subscription hears."""

    ENDED = "ended"
    INTERRUPTED = "interrupted"
    BUDGET = "budget"
    DEADLINE = "deadline"


ALL_KINDS: tuple[NotificationKind, ...] = tuple(NotificationKind)


class Subscription(DeferredModel):
    """One subscriber: exactly one of ``email``, ``webhook`` (the emulator) and ``webhook_secret`` (AWS).

    Attributes
    ----------
    email
        An address SNS mails each message to (on AWS once the subscription is confirmed from SNS's first mail).
    webhook
        A URL the message is POSTed to as ``{"text": "..."}``. Only the emulator takes a URL as such: a CDK
        context value would be written into the template.
    webhook_secret
        Name or ARN of a Secrets Manager secret whose JSON SecretString has ``"url"`` (and ``"token"`` when
        ``header`` is given); CloudFormation resolves it when it deploys.
    header
        The header the webhook's receiver checks (its value: the secret's ``token`` on AWS, ``token`` locally);
        none: :data:`DEFAULT_AUTH_HEADER` with a constant value.
    token
        The emulator's header value (with ``header``); kept secret like the URL.
    events
        The kinds heard; all four by default.
    jobs
        A job-name prefix: only the jobs whose name starts with it; every job when absent.
    """

    email: str | None = None
    webhook: SecretStr | None = None
    webhook_secret: str | None = None
    header: str | None = None
    token: SecretStr | None = None
    events: tuple[NotificationKind, ...] = Field(default=ALL_KINDS, min_length=1)
    jobs: str | None = Field(default=None, min_length=1, max_length=48)

    @field_validator("email")
    @classmethod
    def _email_shape(cls, value: str | None) -> str | None:
        if value is not None and not _EMAIL.fullmatch(value):
            raise ValueError(f"{value!r} is not an e-mail address")
        return value

    @field_validator("webhook")
    @classmethod
    def _webhook_shape(cls, value: SecretStr | None) -> SecretStr | None:
        # The message names no URL: a refused one may hold a token.
        if value is not None and not _URL.fullmatch(value.get_secret_value()):
            raise ValueError("webhook must be an http:// or https:// URL")
        return value

    @field_validator("header")
    @classmethod
    def _header_shape(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9-]{1,64}", value):
            raise ValueError(f"header {value!r} must be an HTTP header name (letters, digits, '-')")
        return value

    @field_validator("jobs")
    @classmethod
    def _prefix_shape(cls, value: str | None) -> str | None:
        # A prefix of a valid name; the name rule anchors its end, which a prefix has not.
        if value is not None and not re.fullmatch(NAME.rstrip("$"), value):
            raise ValueError(
                f"jobs {value!r} must be the start of a job name (lower-case letters, digits, '-')"
            )
        return value

    @field_validator("events")
    @classmethod
    def _distinct(cls, value: tuple[NotificationKind, ...]) -> tuple[NotificationKind, ...]:
        return tuple(dict.fromkeys(value))

    @model_validator(mode="after")
    def _one_destination(self) -> Subscription:
        given = [name for name in ("email", "webhook", "webhook_secret") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("a subscription has exactly one of email, webhook and webhook_secret")
        if self.email is not None and (self.header or self.token):
            raise ValueError("header and token are for webhooks")
        if self.token is not None and self.header is None:
            raise ValueError("token is the value of header: give header too")
        if self.webhook_secret is not None and self.token is not None:
            raise ValueError("with webhook_secret the token is the secret's 'token' key, not an option")
        return self

    @property
    def kind(self) -> str:
        """``email`` or ``webhook``."""
        return "email" if self.email is not None else "webhook"


class NotificationRule(NamedTuple):
    """One subscription as the builders make it: a rule on the bus and its one target."""

    name: str  # logical name, e.g. "notify-1-webhook"
    description: str
    pattern: dict[str, Any]
    subscription: Subscription


def parse_subscription(text: str) -> Subscription:
    """Read the ``--notify`` form: ``email=ADDRESS`` or ``webhook=URL``, then ``,events=a+b``, ``,jobs=PREFIX``,
    ``,header=NAME``, ``,token=VALUE``.

    Parameters
    ----------
    text
        E.g. ``webhook=http://127.0.0.1:8080/hook,events=ended+interrupted,jobs=nightly-``.

    Returns
    -------
    Subscription
        The validated subscription.

    Raises
    ------
    ValueError
        When a part is unknown or malformed; the message never repeats a URL or token.
    """
    values: dict[str, Any] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not value:
            raise ValueError(f"{key or part!r}: each part of --notify is key=value")
        if key not in {"email", "webhook", "events", "jobs", "header", "token"}:
            raise ValueError(f"{key!r}: --notify takes email, webhook, events, jobs, header, token")
        if key in values:
            raise ValueError(f"{key!r} is given twice")
        values[key] = value.split("+") if key == "events" else value
    try:
        return Subscription.model_validate(values)
    except ValueError as exc:
        # pydantic's message repeats the input value: a URL or a token must not reach a terminal or a log.
        errors = getattr(exc, "errors", None)
        if callable(errors):
            reasons = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'notify'}: {e['msg']}" for e in errors())
            raise ValueError(reasons) from None
        raise


def subscription_pattern(subscription: Subscription) -> dict[str, Any]:
    """The event pattern matching exactly the subscription's kinds of event of its jobs.

    One rule per subscription, its kinds as branches of ``$or``
    (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-create-pattern-operators.html#eb-filtering-complex-example-or),
    so an event of two kinds reaches the subscriber once. The job-name prefix is a ``prefix`` match on
    ``detail.name`` in each branch.
    """
    kinds = set(subscription.events)
    name = {"name": [{"prefix": subscription.jobs}]} if subscription.jobs else {}
    statuses: list[str] = []
    if NotificationKind.ENDED in kinds:
        statuses += sorted(status.value for status in TERMINAL_STATUSES)
    if NotificationKind.INTERRUPTED in kinds:
        statuses.append(JobStatus.INTERRUPTED.value)
    branches: list[dict[str, Any]] = []
    if statuses:
        branches.append({"detail-type": [STATUS_CHANGE], "detail": {"status": statuses, **name}})
    # A budget failure is also an end: with "ended" it is already matched.
    if NotificationKind.BUDGET in kinds and NotificationKind.ENDED not in kinds:
        budget = {"status": [JobStatus.FAILED.value], "error": {"type": [BUDGET_EXCEEDED]}, **name}
        branches.append({"detail-type": [STATUS_CHANGE], "detail": budget})
    if NotificationKind.DEADLINE in kinds:
        branches.append({"detail-type": [DEADLINE_DECISION], **({"detail": name} if name else {})})
    pattern: dict[str, Any] = {"source": [SOURCE]}
    if len(branches) == 1:
        return {**pattern, **branches[0]}
    return {**pattern, "$or": branches}


_ARTICLE = {"email": "an e-mail", "webhook": "a webhook"}


def notification_rules(subscriptions: Sequence[Subscription]) -> tuple[NotificationRule, ...]:
    """The rules of ``subscriptions``, named by their position (``notify-1-email``, ``notify-2-webhook``, ...)."""
    rules = []
    for index, subscription in enumerate(subscriptions, start=1):
        jobs = f"jobs named {subscription.jobs}*" if subscription.jobs else "every job"
        kinds = ", ".join(kind.value for kind in subscription.events)
        rules.append(
            NotificationRule(
                name=f"notify-{index}-{subscription.kind}",
                description=f"Notifies {_ARTICLE[subscription.kind]} subscriber of {kinds} events of {jobs}.",
                pattern=subscription_pattern(subscription),
                subscription=subscription,
            )
        )
    return tuple(rules)


class Transformer(NamedTuple):
    """An EventBridge ``InputTransformer``: variables read from the event and the template they fill."""

    paths: dict[str, str]
    template: str


# The variables every message reads. Each event spotrun publishes carries them (spotrun.control.job_events); a
# headline is safe to place in a template as it is (spotrun.model.job.bus_events.safe_text).
_PATHS = {"headline": "$.detail.headline", "job": "$.detail.job_id", "type": "$.detail-type", "at": "$.time"}


def message_transformer(kind: str) -> Transformer:
    """The input transformer of a subscriber's message
    (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-transform-target-input.html).

    Parameters
    ----------
    kind
        ``webhook``: Slack's incoming-webhook body ``{"text": "..."}``
        (https://api.slack.com/messaging/webhooks); ``email``: plain text, the mail's body.
    """
    if kind == "webhook":
        return Transformer(_PATHS, '{"text": "spotrun: <headline>"}')
    # A template that is not JSON is delivered as text; SNS mails it as the message's body.
    return Transformer(
        _PATHS,
        "spotrun: <headline>\n\n<type> at <at>.\nDetails: spotrun status <job>\n",
    )


def parse_many(texts: Iterable[str]) -> tuple[Subscription, ...]:
    """:func:`parse_subscription` of each text, in order."""
    return tuple(parse_subscription(text) for text in texts)

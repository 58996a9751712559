"""EventBridge rule targets that notify people: API destinations and SNS topics, delivered as AWS delivers them.

moto 5.2.5 calls an API destination only with ``MOTO_EVENTS_INVOKE_HTTP`` set, and then without the event as its
body nor the connection's authorization; an SNS target raises ``NotImplementedError``. Here:

- **Input transformers** are applied as EventBridge applies them
  (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-transform-target-input.html): each variable of
  ``InputPathsMap`` is read from the event; a string goes into the template as it is (EventBridge does not escape
  it), an object or array as its JSON; a path that matches nothing creates no variable and its placeholder is
  left empty; the predefined ``aws.events.*`` variables are filled. A template that is a JSON object or array is
  sent as JSON, any other template as text. (moto's own parser parses every template as JSON, so a text message
  fails there.)
- **API destinations** (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-api-destinations.html): the
  destination's method and URL, the transformed event as the body (``application/json; charset=utf-8``, the
  default content type), the connection's authorization (API key header, or basic) and its invocation header
  parameters, then the target's ``HttpParameters`` headers; a 5-second client timeout. A timeout, a connection
  error, 401, 407, 409, 429 and any 5xx are retried; any other answer ends the delivery (a 4xx is not retried).
  AWS calls public HTTPS endpoints only; the emulator also calls ``http://`` ones, so that a test's or a user's
  receiver on 127.0.0.1 hears what a Slack URL would.
- **Retries** follow the target's ``RetryPolicy`` (``MaximumRetryAttempts``, default 185;
  ``MaximumEventAgeInSeconds``, default 86 400; https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-retry-policy.html)
  with an exponential back-off. What is modelled: the two limits and the retried answers. What is not: AWS's
  jitter and its back-off's exact pace (this one doubles from ``retry_delay_seconds`` up to a minute), and the
  destination's invocation rate limit.
- **Dead-letter queue** (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html): an event
  whose retries are spent (or whose answer is not retried) goes to the target's ``DeadLetterConfig`` queue when
  it has one, with the attributes ``ERROR_CODE``, ``ERROR_MESSAGE``, ``RULE_ARN`` and ``TARGET_ARN``.
- **SNS topics**: the transformed event is published to the topic (a text as it is, JSON as its text), which
  delivers it to the topic's subscriptions (e-mail ones: :mod:`spotrun.local.notifications.sns_email`).

Nothing here logs an endpoint: a webhook's URL may carry its token.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

# https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-api-destinations.html: EventBridge waits at most
# five seconds for an endpoint's answer.
CLIENT_TIMEOUT_SECONDS = 5.0
DEFAULT_MAX_RETRIES = 185
DEFAULT_MAX_AGE_SECONDS = 86_400
MAX_BACKOFF_SECONDS = 60.0
_RETRIED_STATUSES = frozenset({401, 407, 409, 429})
USER_AGENT = "Amazon/EventBridge/ApiDestinations"
CONTENT_TYPE = "application/json; charset=utf-8"


# Set while this thread calls an endpoint: urllib3 logs each request's URL path at DEBUG, and a Slack webhook's
# path is its token.
_calling = threading.local()
# The loggers that name a request's URL (urllib3's connection pool; its retry logger when retries are on).
_URL_LOGGERS = ("urllib3.connectionpool", "urllib3.util.retry")


class _NoEndpointRecords(logging.Filter):
    """Drops the records logged while a notification's endpoint is called."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_calling, "active", False)


_NO_ENDPOINT_RECORDS = _NoEndpointRecords()


def hide_endpoints_from_logs() -> None:
    """Keep the endpoints' URLs out of urllib3's logs (idempotent: a logger holds a filter once)."""
    for name in _URL_LOGGERS:
        logging.getLogger(name).addFilter(_NO_ENDPOINT_RECORDS)


def apply_transformer(
    transformer: dict[str, Any], event: dict[str, Any], rule_arn: str, rule_name: str
) -> Any:
    """What a target with an ``InputTransformer`` receives (see the module docstring for the rules).

    Parameters
    ----------
    transformer
        ``{"InputPathsMap": {...}, "InputTemplate": "..."}``.
    event
        The event as delivered (its envelope).
    rule_arn, rule_name
        For the predefined ``aws.events.rule-arn`` and ``aws.events.rule-name``.

    Returns
    -------
    Any
        A dict or list when the template is JSON, else the text.
    """
    from jsonpath_ng.ext import parse

    template = transformer.get("InputTemplate", "")
    values: dict[str, str] = {
        "aws.events.rule-arn": rule_arn,
        "aws.events.rule-name": rule_name,
        "aws.events.event.ingestion-time": str(event.get("time", "")),
        "aws.events.event": json.dumps({k: v for k, v in event.items() if k != "detail"}),
        "aws.events.event.json": json.dumps(event),
    }
    for name, path in transformer.get("InputPathsMap", {}).items():
        matches = parse(path).find(event)
        if not matches:
            values[name] = ""  # no variable is created for a path without a match
            continue
        value = matches[0].value
        values[name] = value if isinstance(value, str) else json.dumps(value)
    for name, value in values.items():
        template = template.replace(f"<{name}>", value)
    stripped = template.strip()
    if stripped[:1] in ("{", "["):
        return json.loads(stripped)
    return template


@dataclass(frozen=True)
class Outcome:
    """How one delivery ended: delivered, or why not (the dead-letter attributes)."""

    delivered: bool
    attempts: int
    error_code: str = ""
    error_message: str = ""


def _auth_headers(connection: Any) -> dict[str, str]:
    """The headers a connection adds (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-target-connection.html)."""
    parameters = connection.auth_parameters
    headers: dict[str, str] = {}
    if connection.authorization_type == "API_KEY":
        key = parameters["ApiKeyAuthParameters"]
        headers[key["ApiKeyName"]] = key["ApiKeyValue"]
    elif connection.authorization_type == "BASIC":
        basic = parameters["BasicAuthParameters"]
        pair = f"{basic['Username']}:{basic['Password']}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    else:
        # OAuth needs a token endpoint exchange the emulator does not run: refused, not silently skipped.
        raise NotImplementedError(f"the emulator sends no {connection.authorization_type} authorization")
    for header in parameters.get("InvocationHttpParameters", {}).get("HeaderParameters", []):
        headers[header["Key"]] = header["Value"]
    return headers


def _find(items: Any, arn: str, what: str) -> Any:
    for item in items:
        if item.arn == arn:
            return item
    raise LookupError(f"no {what} {arn}")


def deliver_to_api_destination(
    account_id: str,
    region: str,
    rule_arn: str,
    target: dict[str, Any],
    body: Any,
    first_seen: float,
    *,
    retry_delay_seconds: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.time,
) -> Outcome:
    """Call the target's API destination with ``body``, retrying as its ``RetryPolicy`` allows.

    Parameters
    ----------
    account_id, region
        Whose EventBridge holds the destination and its connection.
    rule_arn
        For the dead-letter message.
    target
        The rule's target (``Arn``, ``RetryPolicy``, ``DeadLetterConfig``, ``HttpParameters``).
    body
        The transformed event.
    first_seen
        When EventBridge received the event (epoch seconds): ``MaximumEventAgeInSeconds`` counts from it.
    retry_delay_seconds
        The first back-off; it doubles up to :data:`MAX_BACKOFF_SECONDS`.
    sleep, now
        The clock (tests pass their own).

    Returns
    -------
    Outcome
        Delivered, or the error the dead-letter queue was given.
    """
    import requests
    from moto.events.models import events_backends

    backend = events_backends[account_id][region]
    destination = _find(backend.destinations.values(), target["Arn"], "API destination")
    connection = _find(backend.connections.values(), destination.connection_arn, "connection")
    headers = {"Content-Type": CONTENT_TYPE, "User-Agent": USER_AGENT, **_auth_headers(connection)}
    headers.update(target.get("HttpParameters", {}).get("HeaderParameters", {}))
    data = (body if isinstance(body, str) else json.dumps(body)).encode()
    policy = target.get("RetryPolicy", {})
    max_retries = int(policy.get("MaximumRetryAttempts", DEFAULT_MAX_RETRIES))
    max_age = float(policy.get("MaximumEventAgeInSeconds", DEFAULT_MAX_AGE_SECONDS))
    delay = retry_delay_seconds
    attempts = 0
    while True:
        attempts += 1
        _calling.active = True
        try:
            answer = requests.request(
                destination.http_method,
                destination.invocation_endpoint,
                data=data,
                headers=headers,
                timeout=CLIENT_TIMEOUT_SECONDS,
            )
            status = answer.status_code
            if status < 300:
                return Outcome(True, attempts)
            code = "SDK_CLIENT_ERROR" if status < 500 else "SDK_SERVER_ERROR"
            message = f"HTTP {status}"
            retried = status in _RETRIED_STATUSES or status >= 500
        except requests.RequestException as exc:
            # Its text names the URL: only its type is kept.
            code, message, retried = "SDK_CLIENT_ERROR", type(exc).__name__, True
        finally:
            _calling.active = False
        expired = now() + delay - first_seen > max_age
        if not retried or attempts > max_retries or expired:
            outcome = Outcome(False, attempts, code, message)
            logger.warning(
                "notification to %s not delivered after %d attempts (%s)", destination.name, attempts, message
            )
            dead_letter(account_id, region, rule_arn, target, body, outcome)
            return outcome
        sleep(delay)
        delay = min(delay * 2, MAX_BACKOFF_SECONDS)


def dead_letter(
    account_id: str, region: str, rule_arn: str, target: dict[str, Any], body: Any, outcome: Outcome
) -> None:
    """Send an undelivered event to the target's dead-letter queue, when it has one."""
    arn = target.get("DeadLetterConfig", {}).get("Arn")
    if not arn:
        return
    from moto.sqs.models import sqs_backends

    def attribute(value: str) -> dict[str, str]:
        return {"DataType": "String", "StringValue": value}

    sqs_backends[account_id][arn.split(":")[3]].send_message(
        queue_name=arn.split(":")[5],
        message_body=body if isinstance(body, str) else json.dumps(body),
        message_attributes={
            "ERROR_CODE": attribute(outcome.error_code),
            "ERROR_MESSAGE": attribute(outcome.error_message),
            "RULE_ARN": attribute(rule_arn),
            "TARGET_ARN": attribute(target["Arn"]),
        },
    )


def publish_to_topic(account_id: str, target: dict[str, Any], body: Any) -> None:
    """Publish the transformed event to the target's SNS topic (its subscriptions then deliver it)."""
    from moto.sns.models import sns_backends

    arn = target["Arn"]
    message = body if isinstance(body, str) else json.dumps(body)
    sns_backends[account_id][arn.split(":")[3]].publish(message=message, arn=arn)

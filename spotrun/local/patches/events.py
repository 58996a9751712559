"""EventBridge rules that deliver to Lambda functions, state machines, API destinations and SNS topics, as in AWS.

moto matches rules but delivers only to SQS, Logs, archives and buses; a Lambda, Step Functions or SNS target raises
``NotImplementedError`` and an API destination gets no body. The replacement of ``Rule.send_to_targets`` delivers
those four on a thread of their own (EventBridge never makes the producer wait; the notifying two as
:mod:`spotrun.local.notifications.targets` describes) and leaves the rest to moto.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spotrun.local.notifications import sns_email
from spotrun.local.notifications import targets as notify_targets
from spotrun.local.patches import s3_events
from spotrun.local.patches.reversible import PatchSet

logger = logging.getLogger(__name__)

# moto stamps the events it builds from its template with this one id; consumers that deduplicate by event id
# would drop all but one.
_MOTO_CONSTANT_EVENT_ID = "17793124-05d4-b198-2fde-7ededc63b103"


def fix_moto_event(event: dict[str, Any]) -> None:
    """Give an event built from moto's template a unique ``id``, in place.

    In place, because moto hands the same dict to every rule, and all must see one id. S3's own fields are
    built right in the first place (:mod:`spotrun.local.patches.s3_events`).
    """
    if event.get("id") == _MOTO_CONSTANT_EVENT_ID:
        event["id"] = str(uuid.uuid4())


class Dispatcher:
    """Runs deliveries on daemon threads and can wait for the ones in flight when the runtime stops."""

    def __init__(self) -> None:
        self._threads: set[threading.Thread] = set()
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, name: str, action: Callable[[], object]) -> None:
        """Run ``action`` on its own thread; dropped once the dispatcher is closed."""

        def run() -> None:
            try:
                action()
            except Exception:
                logger.exception("delivery %s failed", name)
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

        thread = threading.Thread(target=run, name=name, daemon=True)
        with self._lock:
            if self._closed:
                return
            self._threads.add(thread)
        thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Refuse new deliveries and wait up to ``timeout`` seconds for those in flight."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


def envelope(event: dict[str, Any]) -> dict[str, Any]:
    """The event as AWS delivers it: RFC 3339 ``time``, no moto-only keys, a unique ``id``."""
    delivered = copy.deepcopy(event)
    delivered.pop("ingestion-time", None)
    when = delivered.get("time")
    if isinstance(when, int | float):
        delivered["time"] = dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    elif isinstance(when, dt.datetime):
        delivered["time"] = when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return delivered


def target_input(
    target: dict[str, Any], event: dict[str, Any], rule_arn: str = "", rule_name: str = ""
) -> Any:
    """What a target gets: constant ``Input``, the ``InputPath`` selection, a transformed or whole event."""
    if "Input" in target:
        return json.loads(target["Input"])
    if target.get("InputPath"):
        from jsonpath_ng.ext import parse

        matches = parse(target["InputPath"]).find(event)
        return matches[0].value if matches else None
    if target.get("InputTransformer"):
        return notify_targets.apply_transformer(target["InputTransformer"], event, rule_arn, rule_name)
    return event


def _invoke_function(account_id: str, arn: str, payload: Any) -> None:
    from moto.awslambda.utils import get_backend

    response_headers: dict[str, str] = {}
    get_backend(account_id, arn.split(":")[3]).invoke(
        function_name=arn,
        qualifier=None,
        body=json.dumps(payload),
        headers={"x-amz-invocation-type": "Event"},
        response_headers=response_headers,
    )
    if response_headers.get("x-amz-function-error"):
        logger.warning("event target %s returned an error", arn)


def _start_execution(account_id: str, arn: str, payload: Any) -> None:
    from moto.stepfunctions.responses import get_backend

    # A nameless execution gets a broken ARN in moto: always name it.
    get_backend(account_id, arn.split(":")[3]).start_execution(
        state_machine_arn=arn, name=str(uuid.uuid4()), execution_input=json.dumps(payload)
    )


def _service(target: dict[str, Any]) -> str:
    """``lambda``, ``states``, ``sns``, ``api-destination`` or another service, from the target's ARN."""
    parts = target["Arn"].split(":")
    if parts[2] == "events" and parts[5].startswith("api-destination/"):
        return "api-destination"
    return parts[2]


_OURS = frozenset({"lambda", "states", "sns", "api-destination"})


def install(
    patches: PatchSet, dispatcher: Dispatcher, outbox: Path | None = None, retry_delay_seconds: float = 1.0
) -> None:
    """Make rule targets of type Lambda, Step Functions, API destination and SNS work, and S3's events carry
    their request's fields.

    Parameters
    ----------
    patches
        Where the patches are recorded (undone when the runtime stops).
    dispatcher
        Runs each delivery on its own thread.
    outbox
        Where SNS e-mail deliveries are written (:mod:`spotrun.local.notifications.sns_email`); none: not patched.
    retry_delay_seconds
        An API destination's first retry back-off.
    """
    from moto.events.models import Rule

    s3_events.install(patches)
    notify_targets.hide_endpoints_from_logs()
    if outbox is not None:
        sns_email.install(patches, outbox)

    original = Rule.send_to_targets

    def send_to_targets(self: Any, original_event: Any, transform_input: bool = True) -> None:
        fix_moto_event(original_event)
        if not self.event_pattern.matches_event(original_event):
            return
        ours = [t for t in self.targets if _service(t) in _OURS]
        theirs = [t for t in self.targets if t not in ours]
        if theirs:
            clone = copy.copy(self)
            clone.targets = theirs
            original(clone, original_event, transform_input)
        event = envelope(original_event)
        received = time.time()
        for target in ours:
            service = _service(target)
            payload = target_input(target, event, self.arn, self.name)
            name = f"event-{self.name}-{target.get('Id', 'target')}"
            action: Callable[[], Any]
            if service == "api-destination":
                action = functools.partial(
                    notify_targets.deliver_to_api_destination,
                    self.account_id,
                    self.region_name,
                    self.arn,
                    target,
                    payload,
                    received,
                    retry_delay_seconds=retry_delay_seconds,
                )
            elif service == "sns":
                action = functools.partial(notify_targets.publish_to_topic, self.account_id, target, payload)
            else:
                deliver = _invoke_function if service == "lambda" else _start_execution
                action = functools.partial(deliver, self.account_id, target["Arn"], payload)
            dispatcher.submit(name, action)

    patches.add(Rule, "send_to_targets", send_to_targets)


def publish(
    account_id: str,
    region: str,
    source: str,
    detail_type: str,
    detail: dict[str, Any],
    resources: list[str],
) -> None:
    """Put one event on the default bus of the emulator, as an AWS service would."""
    from moto.events.models import events_backends

    events_backends[account_id][region].put_events(
        [
            {
                "Source": source,
                "DetailType": detail_type,
                "Detail": json.dumps(detail),
                "Resources": resources,
            }
        ]
    )

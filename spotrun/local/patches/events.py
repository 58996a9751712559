"""EventBridge rules that deliver to Lambda functions and state machines, asynchronously, as in AWS.

moto matches rules but delivers only to SQS, Logs, archives, buses and API destinations; a Lambda or Step
Functions target raises ``NotImplementedError``. The replacement of ``Rule.send_to_targets`` delivers those
two on a thread of their own (EventBridge never makes the producer wait) and leaves the rest to moto.
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
from typing import Any

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

    def submit(self, name: str, action: Callable[[], None]) -> None:
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


def target_input(target: dict[str, Any], event: dict[str, Any]) -> Any:
    """What a target gets: constant ``Input``, the ``InputPath`` selection, a transformed or whole event."""
    if "Input" in target:
        return json.loads(target["Input"])
    if target.get("InputPath"):
        from jsonpath_ng.ext import parse

        matches = parse(target["InputPath"]).find(event)
        return matches[0].value if matches else None
    if target.get("InputTransformer"):
        from moto.events.utils import EventTemplateParser

        transformer = target["InputTransformer"]
        return EventTemplateParser.parse(
            input_template=transformer.get("InputTemplate"),
            input_paths_map=transformer.get("InputPathsMap", {}),
            event={"ingestion-time": event.get("time"), **event},  # type: ignore[typeddict-item]
        )
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


def install(patches: PatchSet, dispatcher: Dispatcher) -> None:
    """Make rule targets of type Lambda and Step Functions work, and S3's events carry their request's fields."""
    from moto.events.models import Rule

    s3_events.install(patches)

    original = Rule.send_to_targets

    def send_to_targets(self: Any, original_event: Any, transform_input: bool = True) -> None:
        fix_moto_event(original_event)
        if not self.event_pattern.matches_event(original_event):
            return
        ours = [t for t in self.targets if t["Arn"].split(":")[2] in ("lambda", "states")]
        theirs = [t for t in self.targets if t not in ours]
        if theirs:
            clone = copy.copy(self)
            clone.targets = theirs
            original(clone, original_event, transform_input)
        event = envelope(original_event)
        for target in ours:
            arn = target["Arn"]
            payload = target_input(target, event)
            deliver = _invoke_function if arn.split(":")[2] == "lambda" else _start_execution
            name = f"event-{self.name}-{target.get('Id', 'target')}"
            dispatcher.submit(name, functools.partial(deliver, self.account_id, arn, payload))

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

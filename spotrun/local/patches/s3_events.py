"""S3's events on EventBridge, with the fields AWS fills from the request that caused them.

moto builds every S3 EventBridge event from one template: the documentation example's ``sequencer``,
``request-id`` and ``source-ip-address``, and a ``reason`` cut from the notification name (``ObjectCreated``
for a put, a copy, a multipart upload and a browser POST alike). This module replaces that builder
(``moto.s3.notifications._send_event_bridge_message``, called with the notification's name, so the API that
created the object is still known) and records, as each S3 request starts, the caller's address and a request id
of its own. The event then carries what AWS documents
(https://docs.aws.amazon.com/AmazonS3/latest/userguide/ev-events.html):

- ``reason``: ``PutObject``, ``POST Object``, ``CopyObject`` or ``CompleteMultipartUpload`` for an object created,
  ``DeleteObject`` for one deleted;
- ``request-id``: the id of the request that caused the event (one per request);
- ``source-ip-address``: the address the request came from;
- ``object.sequencer`` (created and deleted objects): a hexadecimal string that grows with each event on a key.
  Sequencers may differ in length; compared after right-padding the shorter with zeros, the greater is the later
  event (https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-content-structure.html).
"""

from __future__ import annotations

import copy
import logging
import secrets
import threading
import time
import urllib.parse
import uuid
from typing import Any

from spotrun.local.patches.reversible import PatchSet

logger = logging.getLogger(__name__)

# The reason S3 gives, by the notification that moto raises
# (https://docs.aws.amazon.com/AmazonS3/latest/userguide/ev-events.html).
REASONS = {
    "s3:ObjectCreated:Put": "PutObject",
    "s3:ObjectCreated:Post": "POST Object",
    "s3:ObjectCreated:Copy": "CopyObject",
    "s3:ObjectCreated:CompleteMultipartUpload": "CompleteMultipartUpload",
    "s3:ObjectRemoved:Delete": "DeleteObject",
    "s3:ObjectRemoved:DeleteMarkerCreated": "DeleteObject",
}
# Only writes and deletes carry a sequencer ("only used with PUTs and DELETEs",
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-content-structure.html).
SEQUENCED = ("s3:ObjectCreated:", "s3:ObjectRemoved:")
# An address for requests that reach moto without HTTP (in-process mocks): they never left the machine.
LOCAL_ADDRESS = "127.0.0.1"
_REQUEST_ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

_CURRENT = threading.local()  # the S3 request this server thread is serving: .source_ip, .request_id


class Sequencer:
    """Hexadecimal sequencers that grow with every event, so also with every event on one key."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> str:
        """A sequencer greater than every one given before (nanoseconds since the epoch, or one more)."""
        with self._lock:
            self._last = max(time.time_ns(), self._last + 1)
            return f"{self._last:016X}"


def later(first: str, second: str) -> bool:
    """Whether sequencer ``second`` comes after ``first``, compared as S3 documents it.

    Right-pad the shorter with zeros, then compare the strings
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-content-structure.html).
    """
    width = max(len(first), len(second))
    return second.upper().ljust(width, "0") > first.upper().ljust(width, "0")


def new_request_id() -> str:
    """A request id shaped like S3's (16 upper-case letters and digits)."""
    return "".join(secrets.choice(_REQUEST_ID_ALPHABET) for _ in range(16))


def begin_request(request: Any) -> None:
    """Remember, for the events this request causes, where it came from, a fresh request id and its API."""
    _CURRENT.source_ip = getattr(request, "remote_addr", None) or LOCAL_ADDRESS
    _CURRENT.request_id = new_request_id()
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(str(getattr(request, "url", ""))).query, True)
    _CURRENT.tagging = "tagging" in query
    _CURRENT.completing = getattr(request, "method", "") == "POST" and "uploadId" in query


def sends(event_name: str) -> bool:
    """Whether S3 sends ``event_name`` for the current request.

    moto raises ``s3:ObjectTagging:Put`` on every PutObject and CompleteMultipartUpload (it stores the object's
    tags, even none); S3 sends "Object Tags Added" for the tagging API only (PutObjectTagging,
    https://docs.aws.amazon.com/AmazonS3/latest/userguide/ev-events.html).
    """
    if event_name.startswith("s3:ObjectTagging:"):
        return bool(getattr(_CURRENT, "tagging", True))
    if event_name == "s3:ObjectCreated:Put":
        # moto stores a completed multipart upload through its PutObject path, which raises a put of its own
        # before the CompleteMultipartUpload event; S3 sends the one.
        return not getattr(_CURRENT, "completing", False)
    return True


def detail(event_name: str, bucket: Any, key: Any, sequencer: Sequencer, account_id: str) -> dict[str, Any]:
    """The ``detail`` of the EventBridge event that ``event_name`` on ``key`` raises."""
    obj: dict[str, Any] = {"key": key.name}
    if not event_name.startswith("s3:ObjectRemoved:"):
        obj["size"] = key.size
        obj["etag"] = key.etag.replace('"', "")
    if getattr(key, "version_id", None) not in (None, "null"):
        obj["version-id"] = key.version_id
    if event_name.startswith(SEQUENCED):
        obj["sequencer"] = sequencer.next()
    body: dict[str, Any] = {
        "version": "0",
        "bucket": {"name": bucket.name},
        "object": obj,
        "request-id": getattr(_CURRENT, "request_id", None) or new_request_id(),
        "requester": account_id,
        "source-ip-address": getattr(_CURRENT, "source_ip", None) or LOCAL_ADDRESS,
    }
    if event_name in REASONS:
        body["reason"] = REASONS[event_name]
    if event_name == "s3:ObjectRemoved:Delete":
        body["deletion-type"] = "Permanently Deleted"
    elif event_name == "s3:ObjectRemoved:DeleteMarkerCreated":
        body["deletion-type"] = "Delete Marker Created"
    return body


def install(patches: PatchSet) -> None:
    """Build S3's EventBridge events from the request that caused them (see the module's docstring).

    Parameters
    ----------
    patches
        Where the patches are kept (undone when the runtime stops).
    """
    from moto.s3 import notifications
    from moto.s3.responses import S3Response

    sequencer = Sequencer()
    original_setup = S3Response.setup_class

    def setup_class(self: Any, request: Any, full_url: str | None = None, headers: Any = None) -> None:
        begin_request(request)
        original_setup(self, request, full_url, headers)

    def send_event_bridge_message(account_id: str, bucket: Any, event_name: str, key: Any) -> None:
        if not sends(event_name):
            return
        try:
            deliver(account_id, bucket, event_name, key)
        except Exception:
            # S3 sends its events after answering: a failure here must not fail the caller's request.
            logger.exception("S3 event %s on %s/%s not sent", event_name, bucket.name, key.name)

    def deliver(account_id: str, bucket: Any, event_name: str, key: Any) -> None:
        from moto.events.models import events_backends
        from moto.events.utils import _BASE_EVENT_MESSAGE

        event = copy.deepcopy(_BASE_EVENT_MESSAGE)
        event.update(
            {
                "id": str(uuid.uuid4()),
                "detail-type": notifications._detail_type(event_name),
                "source": "aws.s3",
                "account": account_id,
                "time": time.time(),
                "region": bucket.region_name,
                "resources": [bucket.arn],
                "detail": detail(event_name, bucket, key, sequencer, account_id),
            }
        )
        backend = events_backends[account_id][bucket.region_name]
        for bus in backend.event_buses.values():
            for rule in bus.rules.values():
                rule.send_to_targets(event, transform_input=False)

    patches.add(S3Response, "setup_class", setup_class)
    patches.add(notifications, "_send_event_bridge_message", send_event_bridge_message)

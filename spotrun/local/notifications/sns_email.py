"""SNS e-mail subscriptions write each message to an outbox: one file per mail, which a user can read.

moto keeps a topic's messages in memory and sends nothing for the ``email`` and ``email-json`` protocols. SNS mails
an ``email`` subscriber the message text, with the subject the publisher gave or ``AWS Notification Message``,
and an ``email-json`` subscriber the JSON notification
(https://docs.aws.amazon.com/sns/latest/dg/sns-email-notifications.html). Each such mail is written here as
``<outbox>/<time>-<message id>.eml`` (RFC 5322 headers, then the body), written whole then renamed into place, so
a reader never sees half a mail. On AWS a subscription receives nothing until its owner confirms it from SNS's
first mail; the emulator's subscriptions are confirmed at once (no one can click the link).
"""

from __future__ import annotations

import datetime as dt
import json
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path
from typing import Any, Protocol

DEFAULT_SUBJECT = "AWS Notification Message"
SENDER = "no-reply@sns.amazonaws.com"


class Patches(Protocol):
    """Where a patch of moto is applied and recorded (:class:`spotrun.local.patches.reversible.PatchSet`; the
    notifications sit below the patches, which call them, so they name the patch set by its one method)."""

    def add(self, owner: Any, name: str, replacement: Any) -> object:
        """Apply a patch now and remember it for undoing."""
        ...


def write_mail(outbox: Path, to: str, subject: str, body: str, message_id: str) -> Path:
    """Write one mail into ``outbox``; return its path."""
    outbox.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    mail = EmailMessage()
    mail["From"] = SENDER
    mail["To"] = to
    mail["Subject"] = subject
    mail["Date"] = format_datetime(now)
    mail["Message-ID"] = f"<{message_id}@sns.local>"
    mail.set_content(body)
    path = outbox / f"{now.strftime('%Y%m%dT%H%M%S%fZ')}-{message_id}.eml"
    partial = path.with_suffix(".partial")
    partial.write_bytes(bytes(mail))
    partial.replace(path)
    return path


def install(patches: Patches, outbox: Path) -> None:
    """Make every SNS e-mail delivery a file under ``outbox``."""
    from moto.sns.models import Subscription

    original = Subscription.publish

    def publish(self: Any, message: str, message_id: str, subject: str | None = None, **kwargs: Any) -> None:
        if self.protocol == "email":
            write_mail(outbox, self.endpoint, subject or DEFAULT_SUBJECT, message, message_id)
            return
        if self.protocol == "email-json":
            notification = self.get_post_data(message, message_id, subject)
            write_mail(
                outbox, self.endpoint, subject or DEFAULT_SUBJECT, json.dumps(notification), message_id
            )
            return
        original(self, message, message_id, subject=subject, **kwargs)

    patches.add(Subscription, "publish", publish)

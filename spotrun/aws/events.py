"""The AWS events spotrun consumes, as pydantic models (shapes from the AWS documentation).

The EventBridge envelope is modelled here rather than taken from Powertools' parser models
(``aws_lambda_powertools.utilities.parser.models``): importing any of those runs the package's ``__init__``, which
defines and builds 169 models of other services' events, and imports ``pydantic.networks`` with
``importlib.metadata``; that was about 0.15x an ``import boto3`` on the cold start of the two functions that take
these events (docs/cold-start.md). The fields required are the ones EventBridge and S3 always send, as there.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field

from spotrun.model.deferred import DeferredModel
from spotrun.model.ec2 import Ec2EventName


class EventBridgeEvent(DeferredModel):
    """The envelope of every event EventBridge delivers.

    https://docs.aws.amazon.com/eventbridge/latest/ref/events-structure.html: ``version``, ``id``,
    ``detail-type``, ``source``, ``account``, ``time``, ``region``, ``resources`` and ``detail`` are in every
    event; ``replay-name`` only in a replayed one. Subclasses type ``detail`` (and may narrow ``detail_type``).
    """

    model_config = ConfigDict(populate_by_name=True)

    version: str
    id: str
    source: str
    account: str
    time: datetime
    region: str
    resources: list[str]
    detail_type: str = Field(alias="detail-type")
    detail: dict[str, object]
    replay_name: str | None = Field(None, alias="replay-name")


class S3Bucket(DeferredModel):
    """The bucket of an S3 event."""

    name: str


class S3Object(DeferredModel):
    """The object of an S3 event; ``size`` and ``etag`` are absent from a delete's."""

    model_config = ConfigDict(populate_by_name=True)

    key: str
    size: int | None = Field(None, ge=0)
    etag: str = ""
    version_id: str | None = Field(None, alias="version-id")
    sequencer: str | None = None


class S3ObjectEventDetail(DeferredModel):
    """The ``detail`` of S3's object events (Object Created...).

    https://docs.aws.amazon.com/AmazonS3/latest/userguide/ev-events.html: ``version``, ``bucket``, ``object``,
    ``request-id`` and ``requester`` are in each; the others depend on the event (``reason``: PutObject, ...).
    """

    model_config = ConfigDict(populate_by_name=True)

    version: str
    bucket: S3Bucket
    object: S3Object
    request_id: str = Field(alias="request-id")
    requester: str
    source_ip_address: str | None = Field(None, alias="source-ip-address")
    reason: str | None = None


class S3ObjectEvent(EventBridgeEvent):
    """An S3 object event through EventBridge (the bucket's EventBridge notifications)."""

    detail: S3ObjectEventDetail  # type: ignore[assignment]


class Ec2InstanceDetail(DeferredModel):
    """The ``detail`` of the three EC2 instance events; the fields present depend on the event."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    instance_id: str = Field(alias="instance-id")
    instance_action: Literal["terminate", "stop", "hibernate"] | None = Field(None, alias="instance-action")
    state: str | None = None


class Ec2InstanceEvent(EventBridgeEvent):
    """An EC2 instance event through EventBridge.

    The region is taken from the envelope: a spot warning's resource ARN may carry the zone where a region
    normally stands.
    """

    detail: Ec2InstanceDetail  # type: ignore[assignment]
    detail_type: Ec2EventName = Field(alias="detail-type")

"""The AWS events spotrun consumes, as pydantic models (shapes from the AWS documentation)."""

from __future__ import annotations

from typing import Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import ConfigDict, Field

from spotrun.model.base import DeferredModel
from spotrun.model.capacity.ec2_states import Ec2EventName
from spotrun.model.job.bus_events import ReturnToSpot, ReturnToSpotName, Source


class Ec2InstanceDetail(DeferredModel):
    """The ``detail`` of the three EC2 instance events; the fields present depend on the event."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    instance_id: str = Field(alias="instance-id")
    instance_action: Literal["terminate", "stop", "hibernate"] | None = Field(None, alias="instance-action")
    state: str | None = None


class Ec2InstanceEvent(EventBridgeModel):
    """An EC2 instance event through EventBridge.

    The region is taken from the envelope: a spot warning's resource ARN may carry the zone where a region
    normally stands.
    """

    # Powertools' EventBridgeModel is no DeferredModel: built on first use like them (docs/development/cold-start.md)
    model_config = ConfigDict(defer_build=True)

    detail: Ec2InstanceDetail
    detail_type: Ec2EventName = Field(alias="detail-type")


class ReturnToSpotEvent(EventBridgeModel):
    """The control plane's request to move a deadline job back to spot, on the deployment's bus."""

    model_config = ConfigDict(defer_build=True)

    source: Source
    detail: ReturnToSpot
    detail_type: ReturnToSpotName = Field(alias="detail-type")

"""The AWS events spotrun consumes, as pydantic models (shapes from the AWS documentation)."""

from __future__ import annotations

from typing import Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import BaseModel, ConfigDict, Field

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"


class Ec2InstanceDetail(BaseModel):
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

    detail: Ec2InstanceDetail
    detail_type: Literal[
        "EC2 Spot Instance Interruption Warning",
        "EC2 Instance Rebalance Recommendation",
        "EC2 Instance State-change Notification",
    ] = Field(alias="detail-type")

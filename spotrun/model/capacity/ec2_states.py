"""EC2's words, as spotrun reads them: the instance states of lost capacity and the instance event names.

One home, because the deployment's event rules (:mod:`spotrun.shape`), the inbound event models
(:mod:`spotrun.aws.events`), the control plane and the emulator must agree on each of them.
"""

from __future__ import annotations

from typing import Final, Literal

# Instance states in which the instance is going or gone: whatever ran on it is lost.
GONE_STATES: Final = ("shutting-down", "terminated", "stopping", "stopped")

# The detail-type of each EC2 instance event spotrun consumes through EventBridge. Each name below is typed
# with this Literal, so mypy refuses a name that is not one of them.
Ec2EventName = Literal[
    "EC2 Spot Instance Interruption Warning",
    "EC2 Instance Rebalance Recommendation",
    "EC2 Instance State-change Notification",
]
SPOT_WARNING: Final[Ec2EventName] = "EC2 Spot Instance Interruption Warning"
REBALANCE: Final[Ec2EventName] = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE: Final[Ec2EventName] = "EC2 Instance State-change Notification"

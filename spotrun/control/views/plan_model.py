"""A job's plan as ``POST /plan`` answers it: pools in order, prices, the estimate, the group, the problems.

The answer's shape, apart from :mod:`spotrun.control.views.plan`, which computes it: the API's plan route names
:class:`JobPlan` as its answer (Powertools reads the route's annotations from its module to validate the answer),
so the users' API imports this module at its cold start, and the planning, with the submission's admission checks
and the deadline policy, at the route's first request only (docs/development/cold-start.md).
"""

from __future__ import annotations

from pydantic import Field

from spotrun.model.base import DeferredModel
from spotrun.model.capacity.candidates import Lifecycle


class PlannedPool(DeferredModel):
    """One pool (instance type in one availability zone) as the plan offers it."""

    order: int = Field(description="1 for the pool tried first, then in the order acquisition tries them.")
    instance_type: str
    availability_zone: str
    lifecycle: Lifecycle = Field(description="spot, or on-demand (the fallback, or spot: false).")
    spot_price_per_hour: float | None = Field(
        None, description="Today's spot price, USD per instance-hour (EC2's spot price history); null: none."
    )
    on_demand_price_per_hour: float | None = Field(
        None, description="The region's on-demand price, USD per instance-hour; null when spotrun has none."
    )
    first: bool = Field(False, description="The pool tried first.")
    group_spot_price_per_hour: float | None = Field(
        None,
        description="The whole group's spot price, USD per hour: resources.nodes instances of this pool (a group "
        "lands all its nodes in one pool); equal to spot_price_per_hour for one node; null: unpriced.",
    )
    group_on_demand_price_per_hour: float | None = Field(
        None,
        description="resources.nodes x on_demand_price_per_hour; null when spotrun has no on-demand price.",
    )


class SkippedPool(DeferredModel):
    """A candidate pool the fleet request offers but EC2 would not launch in today."""

    instance_type: str
    availability_zone: str
    spot_price_per_hour: float
    limit_per_hour: float = Field(description="capacity.max_price_per_hour, else the on-demand price.")


class CostEstimate(DeferredModel):
    """What ``training.expected_hours`` would cost on the first pool of each lifecycle, without interruptions."""

    hours: float = Field(description="training.expected_hours.")
    nodes: int
    spot_usd: float | None = Field(
        None, description="On the first spot pool at today's price; null when spot is not tried or unpriced."
    )
    on_demand_usd: float | None = Field(
        None, description="On the cheapest on-demand pool; null when spotrun has no on-demand price for it."
    )


class GroupPlan(DeferredModel):
    """How a multi-node job's group lands and recovers: one pool for all its nodes, an EFA or not."""

    nodes: int = Field(
        description="resources.nodes: every node in one pool (one type, one zone), all or nothing."
    )
    efa: bool = Field(
        description="The nodes launch with an Elastic Fabric Adapter: resources.efa and every candidate type has "
        "one (one launch template serves the whole request); false: plain ENA networking."
    )
    efa_requested: bool = Field(description="resources.efa.")
    types_without_efa: list[str] = Field(
        default_factory=list, description="The candidate types that have no EFA (any of them means no EFA)."
    )
    replace_node_minutes: int = Field(
        description="capacity.replace_node_minutes: how long the kept nodes wait for a replacement in their pool "
        "before the whole group moves."
    )
    hang_minutes: float | None = Field(
        None, description="training.hang_minutes or its default: a stall this long restarts the group."
    )


class JobPlan(DeferredModel):
    """The answer of POST /plan: what submitting the manifest would do, and what would refuse it."""

    name: str
    nodes: int
    lifecycle: Lifecycle | None = Field(
        description="What the first attempt buys; null when the deadline policy would wait for spot."
    )
    fallback: Lifecycle | None = Field(
        None, description="What is bought when the first finds no capacity (on_demand_fallback); null: none."
    )
    pools: list[PlannedPool] = Field(
        default_factory=list, description="The pools in the order acquisition tries them, fallback included."
    )
    skipped: list[SkippedPool] = Field(
        default_factory=list, description="Spot pools priced above their limit today: not tried."
    )
    first_pool: PlannedPool | None = Field(None, description="The pool tried first (null: none).")
    estimate: CostEstimate | None = Field(None, description="With training.expected_hours only.")
    group: GroupPlan | None = Field(None, description="Multi-node jobs (resources.nodes > 1) only.")
    deadline: str | None = Field(
        None, description="The deadline policy's first decision (with capacity.deadline): choice, slack, why."
    )
    gpu_idle: str | None = Field(
        None,
        description="training.gpu_idle, as it will act: when a node counts as idle and what the job does then; "
        "null: no idle policy.",
    )
    problems: list[str] = Field(
        default_factory=list, description="Every reason POST /jobs would refuse the manifest; empty: it runs."
    )
    ok: bool = Field(description="No problems: submitting it would start the job.")

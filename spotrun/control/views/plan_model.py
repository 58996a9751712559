"""A job's plan as ``POST /plan`` answers it: the pools in order, their prices, the estimate and the problems.

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
    deadline: str | None = Field(
        None, description="The deadline policy's first decision (with capacity.deadline): choice, slack, why."
    )
    problems: list[str] = Field(
        default_factory=list, description="Every reason POST /jobs would refuse the manifest; empty: it runs."
    )
    ok: bool = Field(description="No problems: submitting it would start the job.")

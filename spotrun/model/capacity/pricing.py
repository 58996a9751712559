"""The price each instance ran at, and what a job costs (the instance types themselves:
spotrun.model.capacity.instance_types).

Pure: no AWS call happens here. The catalog's ``on_demand_usd_per_hour`` is a us-east-1 list price used only to
order candidate instance types (cheapest first). What a job cost and what it saved are measured per region:
the price an instance ran at comes from EC2's spot price history for its pool (spot) or from the on-demand
table of its region (:mod:`spotrun.model.capacity.on_demand_prices`), and every figure says which source it came from. A
region or type without a published on-demand figure gets no borrowed one: the comparison is "unknown".
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Final, Literal, Protocol

from pydantic import ConfigDict, Field

from spotrun.model.base import DeferredModel
from spotrun.model.capacity.instance_types import GPU_CATALOG, InstanceTypeInfo, instance_info
from spotrun.model.capacity.on_demand_prices import ON_DEMAND_USD_PER_HOUR, PRICES_SOURCE

__all__ = [
    "BILLING_MINIMUM_SECONDS",
    "GPU_CATALOG",
    "CostReport",
    "InstanceTypeInfo",
    "attempt_price",
    "instance_info",
    "job_cost",
]

# EC2 bills Linux instances per second with a one-minute minimum for each instance it starts.
BILLING_MINIMUM_SECONDS = 60
_SECONDS_PER_HOUR = 3600


def _require_aware(value: datetime, what: str) -> None:
    # A naive datetime would be read in the host's local zone: costs would shift by the UTC offset.
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got {value.isoformat()}")


def billable_seconds(started_at: datetime, ended_at: datetime) -> int:
    """Seconds EC2 bills for one instance that ran from ``started_at`` to ``ended_at``.

    Parameters
    ----------
    started_at, ended_at
        Timezone-aware instants; ``ended_at`` must not be before ``started_at``.

    Returns
    -------
    int
        Whole seconds (a started second counts in full), at least :data:`BILLING_MINIMUM_SECONDS`.

    Raises
    ------
    ValueError
        For a naive datetime or an end before the start.
    """
    _require_aware(started_at, "started_at")
    _require_aware(ended_at, "ended_at")
    elapsed = (ended_at - started_at).total_seconds()
    if elapsed < 0:
        raise ValueError(f"ended_at {ended_at.isoformat()} is before started_at {started_at.isoformat()}")
    # Rounding a partial second up keeps the estimate at or above the bill, never below it.
    return max(math.ceil(elapsed), BILLING_MINIMUM_SECONDS)


def usd_for(price_per_hour: float, started_at: datetime, ended_at: datetime) -> float:
    """What one instance costs at ``price_per_hour`` between two instants, billed like EC2 Linux.

    Parameters
    ----------
    price_per_hour
        USD per instance-hour (the spot price paid, or the on-demand price).
    started_at, ended_at
        Timezone-aware instants; the duration is billed per second with a 60-second minimum.

    Returns
    -------
    float
        USD, not rounded (round once, on the total).

    Raises
    ------
    ValueError
        For a negative price, a naive datetime or an end before the start.
    """
    if price_per_hour < 0:
        raise ValueError(f"price_per_hour must not be negative, got {price_per_hour}")
    return price_per_hour * billable_seconds(started_at, ended_at) / _SECONDS_PER_HOUR


PriceSource = Literal["spot-price-history", "on-demand-table", "estimate", "unknown"]
"""Where the price of an instance came from.

``spot-price-history``: EC2's DescribeSpotPriceHistory for the pool launched; ``on-demand-table``: the on-demand
price of the instance's region (:mod:`spotrun.model.capacity.on_demand_prices`), for an on-demand instance;
``estimate``: a spot instance whose pool had no price history, counted at its region's on-demand price (EC2
never charges a spot instance more than that, so the cost is an upper bound); ``unknown``: no figure at all,
so the instance is not in the cost (and the report says how many such instances ran).
"""

_REGION: Final = r"^[a-z]{2}(?:-gov)?-[a-z]+-\d+"


def region_of_zone(availability_zone: str) -> str:
    """The region of an availability zone, Local Zone or Wavelength Zone (``us-west-2-lax-1a`` -> ``us-west-2``).

    Raises
    ------
    ValueError
        When the name is not an AWS zone name.
    """
    match = re.match(_REGION, availability_zone)
    if match is None:
        raise ValueError(f"{availability_zone!r} is not an AWS availability zone name")
    return match.group(0)


def on_demand_price(instance_type: str, region: str) -> float | None:
    """The published on-demand price of ``instance_type`` in ``region``, USD per hour; None when there is none.

    Never falls back on another region's figure: a region or type missing from
    :data:`spotrun.model.capacity.on_demand_prices.ON_DEMAND_USD_PER_HOUR` has no on-demand price as far as
    spotrun knows.
    """
    return ON_DEMAND_USD_PER_HOUR.get(region, {}).get(instance_type)


def attempt_price(
    *, lifecycle: str, instance_type: str, availability_zone: str, spot_price: float | None
) -> tuple[float | None, PriceSource]:
    """The price an instance runs at, and where that figure came from.

    Parameters
    ----------
    lifecycle
        ``spot`` or ``on-demand``.
    instance_type, availability_zone
        The pool the instance was launched in.
    spot_price
        The pool's price from DescribeSpotPriceHistory (spot only), or None when EC2 reported none.

    Returns
    -------
    tuple[float | None, PriceSource]
        USD per hour (None when unknown) and its :data:`PriceSource`.
    """
    if lifecycle == "spot" and spot_price is not None:
        return spot_price, "spot-price-history"
    listed = on_demand_price(instance_type, region_of_zone(availability_zone))
    if listed is None:
        return None, "unknown"
    return listed, "on-demand-table" if lifecycle == "on-demand" else "estimate"


class CostedAttempt(Protocol):
    """The shape of one instance's run that :func:`job_cost` can price.

    ``spotrun.model.job.attempt.Attempt`` fits it; read-only properties let frozen models and dataclasses fit as well.
    One attempt is one instance: a multi-node run is priced as one attempt per node, and a node kept from one
    attempt into the next is one instance in two records (``instance_id`` counts it once).
    """

    @property
    def instance_id(self) -> str: ...

    @property
    def instance_type(self) -> str: ...

    @property
    def availability_zone(self) -> str: ...

    @property
    def lifecycle(self) -> str: ...

    @property
    def price_per_hour(self) -> float | None: ...

    @property
    def started_at(self) -> datetime: ...

    @property
    def ended_at(self) -> datetime | None: ...


class CostReport(DeferredModel):
    """What a job cost, split by how its instances were bought, and what its spot instances saved.

    Savings are measured only where both figures exist: a spot instance against the on-demand price of the
    same type in its own region. On-demand instances save nothing and are not in the comparison.
    """

    model_config = ConfigDict(frozen=True)

    usd: float = Field(
        description="What the job's instances cost, USD, rounded to 4 decimals: spot_usd + on_demand_usd."
    )
    spot_usd: float = Field(0.0, description="What its spot instances cost, USD, at the prices they ran at.")
    on_demand_usd: float = Field(
        0.0, description="What its on-demand instances cost, USD, at on-demand prices."
    )
    spot_instances: int = Field(0, description="Spot instances that ran (attempts and unused standbys).")
    on_demand_instances: int = Field(0, description="On-demand instances that ran.")
    unpriced_instances: int = Field(
        0, description="Instances that ran at a price spotrun does not know: they are not in usd."
    )
    spot_at_on_demand_usd: float | None = Field(
        None,
        description="What the compared spot instance-seconds would have cost on demand in their region, USD; "
        "null when no spot instance could be compared.",
    )
    savings_pct: float | None = Field(
        None,
        description="1 - cost / on-demand cost over the compared spot instances, in percent (1 decimal); null "
        "when nothing was compared.",
    )
    spot_not_compared: int = Field(
        0,
        description="Spot instances without an on-demand figure for their type and region: their saving is "
        "unknown and left out of savings_pct.",
    )
    on_demand_source: str = Field(
        PRICES_SOURCE, description="Where the on-demand figures come from, and their date."
    )


def job_cost(attempts: Iterable[CostedAttempt], *, now: datetime | None = None) -> CostReport:
    """Price every instance a job ran on, each billed per second with EC2's 60-second minimum.

    Parameters
    ----------
    attempts
        Every instance the job ran on, finished or not, unused standbys included
        (``spotrun.model.job.record.Job.billed_instances``).
    now
        The end used for an instance still running (``ended_at`` is None). Required only when one is.

    Returns
    -------
    CostReport
        The cost split into spot and on-demand, and the saving of the spot instances against the on-demand
        price of their own region, where that price is known.

    Raises
    ------
    ValueError
        When an attempt is still running and ``now`` is not given, or for naive or inverted times.
    """
    spot_usd = on_demand_usd = compared_spot_usd = 0.0
    spot_at_on_demand: float | None = None
    # Instances by kind, each counted once however many records (attempts) it ran in.
    spot_ids: set[str] = set()
    on_demand_ids: set[str] = set()
    unpriced_ids: set[str] = set()
    not_compared_ids: set[str] = set()
    for attempt in attempts:
        ended_at = attempt.ended_at
        if ended_at is None:
            if now is None:
                raise ValueError(
                    f"an attempt on {attempt.instance_type} started at {attempt.started_at.isoformat()} is "
                    "still running: pass now= to cost it up to the present"
                )
            ended_at = now
        if attempt.price_per_hour is None:
            unpriced_ids.add(attempt.instance_id)
            continue
        usd = usd_for(attempt.price_per_hour, attempt.started_at, ended_at)
        if attempt.lifecycle != "spot":
            on_demand_ids.add(attempt.instance_id)
            on_demand_usd += usd
            continue
        spot_ids.add(attempt.instance_id)
        spot_usd += usd
        listed = on_demand_price(attempt.instance_type, region_of_zone(attempt.availability_zone))
        if listed is None:
            not_compared_ids.add(attempt.instance_id)
            continue
        compared_spot_usd += usd
        spot_at_on_demand = (spot_at_on_demand or 0.0) + usd_for(listed, attempt.started_at, ended_at)
    savings = None
    if spot_at_on_demand:
        # + 0.0 turns a rounded -0.0 into 0.0, which reads better in a report.
        savings = round((1 - compared_spot_usd / spot_at_on_demand) * 100, 1) + 0.0
    return CostReport(
        usd=round(spot_usd + on_demand_usd, 4),
        spot_usd=round(spot_usd, 4),
        on_demand_usd=round(on_demand_usd, 4),
        spot_instances=len(spot_ids),
        on_demand_instances=len(on_demand_ids),
        unpriced_instances=len(unpriced_ids),
        spot_at_on_demand_usd=None if spot_at_on_demand is None else round(spot_at_on_demand, 4),
        savings_pct=savings,
        spot_not_compared=len(not_compared_ids),
    )

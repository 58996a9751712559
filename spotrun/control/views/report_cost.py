"""The report's cost over time: what the job's instances had cost at each instant, against on-demand prices.

One instance costs what :func:`spotrun.model.capacity.pricing.usd_for` bills (per second, EC2's 60-second minimum)
from its start to the instant asked, so the accrued cost jumps by a minute's worth when an instance starts, stays
flat for that minute, then grows at its price; summed over the instances it is piecewise linear, and its value
at each breakpoint (with the value just before a start) draws it exactly. At the job's end it is the record's cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from spotrun.control.views.report_model import CostPoint
from spotrun.model.capacity.pricing import (
    BILLING_MINIMUM_SECONDS,
    CostedAttempt,
    on_demand_price,
    region_of_zone,
    usd_for,
)

_Priced = tuple[datetime, datetime, float, float]  # start, end, price paid, on-demand price per hour


def _priced(instances: Sequence[CostedAttempt], until: datetime) -> tuple[list[_Priced], int]:
    """Each priced instance's run and its two prices; how many spot instances have no on-demand figure."""
    priced: list[_Priced] = []
    not_compared = 0
    for instance in instances:
        if instance.price_per_hour is None:  # unpriced: not in the cost (CostReport.unpriced_instances)
            continue
        end = instance.ended_at or until
        listed = instance.price_per_hour
        if instance.lifecycle == "spot":
            figure = on_demand_price(instance.instance_type, region_of_zone(instance.availability_zone))
            if figure is None:
                not_compared += 1  # counted at the price paid on both lines: no saving claimed for it
            else:
                listed = figure
        priced.append((instance.started_at, max(end, instance.started_at), instance.price_per_hour, listed))
    return priced, not_compared


def _accrued(priced: list[_Priced], at: datetime, *, strictly_before: bool = False) -> tuple[float, float]:
    paid = on_demand = 0.0
    for start, end, price, listed in priced:
        if start > at or (strictly_before and start == at):
            continue
        stop = min(end, at)
        paid += usd_for(price, start, stop)
        on_demand += usd_for(listed, start, stop)
    return paid, on_demand


def cost_series(
    instances: Sequence[CostedAttempt], since: datetime, until: datetime
) -> tuple[list[CostPoint], int]:
    """The accrued cost of ``instances`` from ``since`` to ``until``, at every instant its pace changes.

    Parameters
    ----------
    instances
        Every instance the job was billed for (:meth:`spotrun.model.job.record.Job.billed_instances`).
    since, until
        The chart's time axis; an instance still running is counted up to ``until``.

    Returns
    -------
    tuple[list[CostPoint], int]
        The points in time order (two at an instance's start: just before it, and with its minute), and how many
        spot instances had no on-demand figure for their type and region (counted at the price paid on the
        on-demand line, so the gap between the lines is only the saving that was measured).
    """
    priced, not_compared = _priced(instances, until)
    minimum = timedelta(seconds=BILLING_MINIMUM_SECONDS)
    breaks = {since, until}
    for start, end, _, _ in priced:
        breaks |= {start, min(start + minimum, end), end}
    points: list[CostPoint] = []
    starts = {start for start, *_ in priced}
    for at in sorted(b for b in breaks if since <= b <= until):
        values = [_accrued(priced, at, strictly_before=True)] if at in starts else []
        values.append(_accrued(priced, at))
        for paid, on_demand in values:
            point = CostPoint(at=at, paid_usd=round(paid, 6), on_demand_usd=round(on_demand, 6))
            if not points or (points[-1].paid_usd, points[-1].on_demand_usd, points[-1].at) != (
                point.paid_usd,
                point.on_demand_usd,
                point.at,
            ):
                points.append(point)
    return points, not_compared

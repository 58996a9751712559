"""The order in which an instant fleet tries the pools of spotrun's request: what a plan shows before paying.

Pure. spotrun sends EC2 one CreateFleet request whose overrides are the candidate pools in request order
(:func:`spotrun.model.capacity.fleet_request.request_pools`); EC2 then chooses among them by the request's allocation
strategy, which :func:`spotrun.model.capacity.fleet_request.build_fleet_request` sets:

- spot, ``price-capacity-optimized``: EC2 "identifies the pools with the highest capacity availability for the
  number of instances that are launching" and "then requests Spot Instances from the lowest priced of these
  pools" (EC2 User Guide, "Allocation strategies for Spot Instances",
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-fleet-allocation-strategy.html). A pool whose spot
  price is above the request's max price (the on-demand price when none is given) launches nothing;
- on-demand, ``lowest-price``: "EC2 Fleet uses price to determine the order, launching the lowest price first"
  (``OnDemandOptionsRequest.AllocationStrategy``,
  https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_OnDemandOptionsRequest.html).

Nobody outside EC2 sees its spare capacity, so the order given here is by price, ties in request order: the
order EC2 follows among pools of alike capacity (and the emulator's, :mod:`spotrun.local.capacity.pools`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def _no_limit(_pool: object) -> float | None:
    return None


def try_order(
    pools: Sequence[T],
    price: Callable[[T], float | None],
    limit: Callable[[T], float | None] = _no_limit,
) -> tuple[list[T], list[T]]:
    """The pools in the order an instant fleet tries them, and the pools it would not try at all.

    Parameters
    ----------
    pools
        The request's pools, in request order (:func:`~spotrun.model.capacity.fleet_request.request_pools`).
    price
        The pool's price for the request's lifecycle (today's spot price, or the on-demand price), USD per
        hour; None when unknown (tried last, in request order).
    limit
        Spot only: the highest price the request accepts in that pool (``capacity.max_price_per_hour``, else
        the pool's on-demand price, as EC2 does), or None for no limit. A pool priced above it is not tried.

    Returns
    -------
    tuple[list, list]
        The pools tried, first one first; the pools priced above their limit, in request order.
    """
    over: set[int] = set()
    for index, pool in enumerate(pools):
        paid, most = price(pool), limit(pool)
        if paid is not None and most is not None and paid > most:
            over.add(index)
    tried = [(index, pool) for index, pool in enumerate(pools) if index not in over]

    def key(item: tuple[int, T]) -> tuple[bool, float, int]:
        # An unknown price sorts last; the request's own order breaks ties, as in EC2's allocation.
        paid = price(item[1])
        return (paid is None, paid or 0.0, item[0])

    tried.sort(key=key)
    return [pool for _, pool in tried], [pool for index, pool in enumerate(pools) if index in over]

"""The emulator's spot capacity model: pools (instance type x AZ) with a price, a capacity and a boot delay.

Pure logic, no moto: :mod:`spotrun.local.patches.ec2` asks :meth:`CapacityModel.plan` which pools an instant
``CreateFleet`` request gets, and tells the model when instances start and end. Tests and chaos change the
pools (:meth:`CapacityModel.exhaust`, :meth:`CapacityModel.set_capacity`, :meth:`CapacityModel.set_price`) and
queue CreateFleet errors (:attr:`CapacityModel.fleet_errors`, :mod:`spotrun.local.capacity.injected_errors`).
"""

from __future__ import annotations

import datetime as dt
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from spotrun.local.capacity.catalog import INSTANCE_TYPES, Pool, PoolKey
from spotrun.local.capacity.injected_errors import InjectedFleetErrors
from spotrun.model.capacity.candidates import Lifecycle

INSUFFICIENT_CAPACITY = "InsufficientInstanceCapacity"
MAX_PRICE_TOO_LOW = "SpotMaxPriceTooLow"


@dataclass(frozen=True)
class Candidate:
    """One (instance type, subnet) a CreateFleet request allows, after expanding its overrides."""

    order: int  # position in the request; ties are broken by it
    instance_type: str
    availability_zone: str
    subnet_id: str | None = None
    max_price: float | None = None  # spot only; None means the on-demand price, as in AWS
    priority: float | None = None
    context: Any = field(default=None, compare=False)  # opaque to the model (the patch keeps its override)


@dataclass(frozen=True)
class Shortfall:
    """Why one candidate could not supply instances (an entry of CreateFleet ``Errors``)."""

    candidate: Candidate
    code: str
    message: str


@dataclass
class FleetPlan:
    """Which candidates launch how many instances, and what could not be served."""

    allocations: list[tuple[Candidate, int]] = field(default_factory=list)
    shortfalls: list[Shortfall] = field(default_factory=list)

    @property
    def launched(self) -> int:
        """How many instances the plan launches."""
        return sum(count for _, count in self.allocations)


def on_demand_price(instance_type: str) -> float:
    """On-demand price of ``instance_type`` in USD per hour, or infinity when the catalogue lacks it."""
    info = INSTANCE_TYPES.get(instance_type)
    return info.on_demand_usd_per_hour if info else math.inf


class CapacityModel:
    """Thread-safe state of every pool: current capacity, price history and the instances holding slots, and the
    CreateFleet errors injected for the next calls (:attr:`fleet_errors`).

    Parameters
    ----------
    pools
        The declared pools; at most one per (type, zone).
    now
        Clock used for price history timestamps (injectable for tests).
    """

    def __init__(self, pools: Iterable[Pool], now: Any = None):
        self._now = now or (lambda: dt.datetime.now(dt.UTC))
        self._lock = threading.RLock()
        self._declared: dict[PoolKey, Pool] = {}
        self._capacity: dict[tuple[PoolKey, Lifecycle], int] = {}
        # Prices before the model existed are unknown; a record an hour back lets cost queries that start
        # slightly before a launch still find the price in effect.
        start = self._now() - dt.timedelta(hours=1)
        self._prices: dict[PoolKey, list[tuple[dt.datetime, float]]] = {}
        self._holders: dict[str, tuple[PoolKey, Lifecycle]] = {}
        # When each instance took its slot and freed it: what EC2 bills, for tests to check a job's cost against.
        self._held: dict[str, tuple[dt.datetime, dt.datetime | None]] = {}
        self.fleet_errors = InjectedFleetErrors()  # what the next CreateFleet calls fail with
        for pool in pools:
            if pool.key in self._declared:
                raise ValueError(f"duplicate pool {pool.key}")
            self._declared[pool.key] = pool
            self._capacity[(pool.key, "spot")] = pool.capacity
            self._capacity[(pool.key, "on-demand")] = pool.on_demand_capacity
            self._prices[pool.key] = [(start, pool.spot_price)]

    # ----------------------------------------------------------------------------------------- queries

    def pools(self) -> list[Pool]:
        """Return every pool with its current spot price and spot capacity."""
        with self._lock:
            return [
                replace(pool, spot_price=self.price(*key), capacity=self._capacity[(key, "spot")])
                for key, pool in self._declared.items()
            ]

    def pool(self, instance_type: str, availability_zone: str) -> Pool | None:
        """Return the declared pool of (type, zone), or None when the emulator does not offer it."""
        return self._declared.get((instance_type, availability_zone))

    def price(self, instance_type: str, availability_zone: str) -> float:
        """Current spot price of a pool."""
        with self._lock:
            return self._prices[(instance_type, availability_zone)][-1][1]

    def used(self, instance_type: str, availability_zone: str, lifecycle: Lifecycle = "spot") -> int:
        """How many running (or booting) instances hold a slot of the pool."""
        with self._lock:
            key = (instance_type, availability_zone)
            return sum(1 for held in self._holders.values() if held == (key, lifecycle))

    def free(self, instance_type: str, availability_zone: str, lifecycle: Lifecycle = "spot") -> int:
        """How many more instances the pool can take now (0 for a pool the emulator does not offer)."""
        with self._lock:
            key = (instance_type, availability_zone)
            if key not in self._declared:
                return 0
            return max(0, self._capacity[(key, lifecycle)] - self.used(*key, lifecycle))

    def price_history(
        self,
        instance_types: Iterable[str] | None = None,
        zones: Iterable[str] | None = None,
        start: dt.datetime | None = None,
        end: dt.datetime | None = None,
    ) -> list[tuple[str, str, dt.datetime, float]]:
        """Price records like DescribeSpotPriceHistory: those in [start, end] plus the one in effect at start.

        Returns
        -------
        list of (instance type, zone, timestamp, price)
            Newest first, as AWS orders them.
        """
        types = set(instance_types) if instance_types else None
        zone_set = set(zones) if zones else None
        records: list[tuple[str, str, dt.datetime, float]] = []
        with self._lock:
            for (itype, zone), history in self._prices.items():
                if (types and itype not in types) or (zone_set and zone not in zone_set):
                    continue
                in_effect = [r for r in history if r[0] <= start][-1:] if start else []
                window = [
                    r for r in history if (start is None or r[0] > start) and (end is None or r[0] <= end)
                ]
                records.extend((itype, zone, when, price) for when, price in in_effect + window)
        return sorted(records, key=lambda r: r[2], reverse=True)

    # ------------------------------------------------------------------------------------ mutations

    def set_capacity(
        self, instance_type: str, availability_zone: str, capacity: int, lifecycle: Lifecycle = "spot"
    ) -> None:
        """Set how many instances a pool can hold; running instances above it keep running."""
        with self._lock:
            key = self._known((instance_type, availability_zone))
            self._capacity[(key, lifecycle)] = max(0, capacity)

    def exhaust(self, instance_type: str, availability_zone: str, lifecycle: Lifecycle = "spot") -> None:
        """Leave the pool no capacity: new launches fail with InsufficientInstanceCapacity."""
        self.set_capacity(instance_type, availability_zone, 0, lifecycle)

    def refill(self, instance_type: str, availability_zone: str) -> None:
        """Give the pool back its declared spot and on-demand capacity."""
        pool = self._declared[self._known((instance_type, availability_zone))]
        self.set_capacity(instance_type, availability_zone, pool.capacity, "spot")
        self.set_capacity(instance_type, availability_zone, pool.on_demand_capacity, "on-demand")

    def set_price(self, instance_type: str, availability_zone: str, price: float) -> None:
        """Record a new spot price for the pool, effective now."""
        with self._lock:
            key = self._known((instance_type, availability_zone))
            self._prices[key].append((self._now(), float(price)))

    def allocate(
        self, instance_id: str, instance_type: str, availability_zone: str, lifecycle: Lifecycle
    ) -> bool:
        """Let ``instance_id`` hold a slot of its pool; False (and nothing held) for a pool not modelled."""
        with self._lock:
            key = (instance_type, availability_zone)
            if key not in self._declared:
                return False
            self._holders[instance_id] = (key, lifecycle)
            self._held[instance_id] = (self._now(), None)
            return True

    def holders(self, instance_type: str, availability_zone: str, lifecycle: Lifecycle = "spot") -> list[str]:
        """The instances holding a slot of the pool, oldest first (a trace's drop reclaims the newest)."""
        with self._lock:
            key = (instance_type, availability_zone)
            return [iid for iid, held in self._holders.items() if held == (key, lifecycle)]

    def release(self, instance_id: str) -> None:
        """Free the slot ``instance_id`` held, if any (idempotent)."""
        with self._lock:
            self._holders.pop(instance_id, None)
            held = self._held.get(instance_id)
            if held is not None and held[1] is None:
                self._held[instance_id] = (held[0], self._now())

    def held(self, instance_id: str) -> tuple[dt.datetime, dt.datetime | None] | None:
        """When ``instance_id`` took its slot (its launch) and freed it (its termination; None: still holds it).

        Parameters
        ----------
        instance_id
            An instance launched into a modelled pool.

        Returns
        -------
        tuple[datetime, datetime | None] | None
            The two times on the model's clock; None for an instance that never held a slot.
        """
        with self._lock:
            return self._held.get(instance_id)

    # ------------------------------------------------------------------------------------- planning

    def plan(
        self,
        candidates: Sequence[Candidate],
        lifecycle: Lifecycle,
        count: int,
        strategy: str | None = None,
    ) -> FleetPlan:
        """Choose pools for ``count`` instances the way an instant EC2 fleet does.

        Spot, ``price-capacity-optimized`` (the default here): among pools with free capacity whose price is
        at most the candidate's max price, the cheapest first, more free capacity breaking ties.
        ``capacity-optimized``: most free capacity first. Other strategies: cheapest first. On-demand:
        ``prioritized`` follows the overrides' priorities, otherwise the cheapest type first.

        Parameters
        ----------
        candidates
            The request's (type, zone) choices in request order.
        lifecycle
            ``spot`` or ``on-demand``.
        count
            Instances wanted.
        strategy
            The request's allocation strategy.

        Returns
        -------
        FleetPlan
            Allocations, and shortfalls when fewer than ``count`` instances can be launched.
        """
        with self._lock:
            usable: list[Candidate] = []
            shortfalls: list[Shortfall] = []
            for cand in candidates:
                problem = self._problem(cand, lifecycle)
                if problem:
                    shortfalls.append(problem)
                else:
                    usable.append(cand)
            usable = self.preferred(usable, lifecycle, strategy)
            plan = FleetPlan()
            taken: dict[PoolKey, int] = {}
            remaining = count
            for cand in usable:
                key = (cand.instance_type, cand.availability_zone)
                take = min(remaining, self.free(*key, lifecycle) - taken.get(key, 0))
                if take <= 0:
                    continue
                plan.allocations.append((cand, take))
                taken[key] = taken.get(key, 0) + take
                remaining -= take
                if remaining == 0:
                    break
            if remaining > 0:
                plan.shortfalls = shortfalls + [
                    Shortfall(c, INSUFFICIENT_CAPACITY, _no_capacity(c)) for c in usable
                ]
            return plan

    def preferred(
        self, candidates: Sequence[Candidate], lifecycle: Lifecycle, strategy: str | None = None
    ) -> list[Candidate]:
        """``candidates`` in the order :meth:`plan` tries them under ``strategy`` (most preferred first)."""
        with self._lock:
            return sorted(candidates, key=self._order_key(lifecycle, strategy))

    def _problem(self, cand: Candidate, lifecycle: Lifecycle) -> Shortfall | None:
        if self.free(cand.instance_type, cand.availability_zone, lifecycle) <= 0:
            return Shortfall(cand, INSUFFICIENT_CAPACITY, _no_capacity(cand))
        if lifecycle == "spot":
            limit = cand.max_price if cand.max_price is not None else on_demand_price(cand.instance_type)
            price = self.price(cand.instance_type, cand.availability_zone)
            if price > limit:
                message = (
                    f"Your Spot request price of {limit} is lower than the minimum required Spot request "
                )
                message += f"fulfillment price of {price}."
                return Shortfall(cand, MAX_PRICE_TOO_LOW, message)
        return None

    def _order_key(self, lifecycle: Lifecycle, strategy: str | None) -> Any:
        strategy = (strategy or "").lower()

        def free(c: Candidate) -> int:
            return self.free(c.instance_type, c.availability_zone, lifecycle)

        def priority(c: Candidate) -> float:
            return c.priority if c.priority is not None else math.inf

        if lifecycle == "on-demand":
            if strategy == "prioritized":
                return lambda c: (priority(c), c.order)
            return lambda c: (on_demand_price(c.instance_type), c.order)
        if strategy.startswith("capacity-optimized"):
            return lambda c: (-free(c), priority(c), c.order)
        if strategy in ("", "price-capacity-optimized"):
            return lambda c: (self.price(c.instance_type, c.availability_zone), -free(c), c.order)
        return lambda c: (self.price(c.instance_type, c.availability_zone), c.order)

    def _known(self, key: PoolKey) -> PoolKey:
        if key not in self._declared:
            raise KeyError(f"no pool {key[0]} in {key[1]}")
        return key


def _no_capacity(cand: Candidate) -> str:
    return (
        f"We currently do not have sufficient {cand.instance_type} capacity in the Availability Zone you "
        f"requested ({cand.availability_zone}). Our system will be working on provisioning additional "
        "capacity. You can currently get capacity by not specifying an Availability Zone in your request "
        "or choosing a different Availability Zone."
    )

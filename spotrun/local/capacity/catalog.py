"""What the emulator offers: GPU instance types (sizes, accelerators, on-demand prices) and spot pools.

The instance types serve two purposes: matching attribute-based ``InstanceRequirements`` of a ``CreateFleet``
request (moto cannot), and drawing the default pool table (spot prices as a fraction of on-demand). Values are
those of us-east-1 Linux on-demand, rounded: plausible, not current. The live state of the pools (capacity in
use, price changes) is :class:`spotrun.local.capacity.pools.CapacityModel`'s.
"""

from __future__ import annotations

import fnmatch
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spotrun.model.capacity.pricing import InstanceTypeInfo, instance_info

PoolKey = tuple[str, str]  # (instance type, availability zone)
DEFAULT_ZONES = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d")


# The types the emulator has pools for: the common single- and multi-GPU families. Their sizes and on-demand
# prices are the control plane's own catalogue (spotrun.model.capacity.pricing), so the two can never disagree.
EMULATED_TYPES = (
    "g4dn.xlarge",
    "g4dn.12xlarge",
    "g5.xlarge",
    "g5.2xlarge",
    "g5.12xlarge",
    "g6.xlarge",
    "g6e.xlarge",
    "p3.2xlarge",
    "p4d.24xlarge",
    "p5.48xlarge",
)
INSTANCE_TYPES: dict[str, InstanceTypeInfo] = {name: instance_info(name) for name in EMULATED_TYPES}
GPU_MANUFACTURER = "nvidia"  # every type in the catalogue carries NVIDIA GPUs


def _within(value: float, bounds: Mapping[str, Any] | None) -> bool:
    """Whether ``value`` lies in an InstanceRequirements ``{"Min": .., "Max": ..}`` range (both optional)."""
    if not bounds:
        return True
    low = bounds.get("Min")
    high = bounds.get("Max")
    if low is not None and value < float(low):
        return False
    return high is None or value <= float(high)


def matches_requirements(info: InstanceTypeInfo, requirements: Mapping[str, Any]) -> bool:
    """Whether an instance type satisfies attribute-based instance requirements.

    Parameters
    ----------
    info
        The instance type.
    requirements
        An ``InstanceRequirements`` structure of a CreateFleet override (``VCpuCount``, ``MemoryMiB``,
        ``AcceleratorCount``, ``AcceleratorManufacturers``, ``AcceleratorNames``, ``AcceleratorTypes``,
        ``AcceleratorTotalMemoryMiB``, ``AllowedInstanceTypes``, ``ExcludedInstanceTypes``).

    Returns
    -------
    bool
        True when every given attribute is satisfied; attributes the emulator does not model are ignored.
    """
    checks = (
        _within(info.vcpus, requirements.get("VCpuCount")),
        _within(info.memory_gib * 1024, requirements.get("MemoryMiB")),
        _within(info.gpus, requirements.get("AcceleratorCount")),
        _within(info.gpus * info.gpu_memory_gib * 1024, requirements.get("AcceleratorTotalMemoryMiB")),
    )
    if not all(checks):
        return False
    manufacturers = requirements.get("AcceleratorManufacturers")
    if manufacturers and GPU_MANUFACTURER not in {m.lower() for m in manufacturers}:
        return False
    names = requirements.get("AcceleratorNames")
    if names and info.gpu_name not in {n.lower() for n in names}:
        return False
    types = requirements.get("AcceleratorTypes")
    if types and "gpu" not in {t.lower() for t in types}:
        return False
    allowed = requirements.get("AllowedInstanceTypes")
    if allowed and not any(fnmatch.fnmatchcase(info.name, pattern) for pattern in allowed):
        return False
    excluded = requirements.get("ExcludedInstanceTypes") or ()
    return not any(fnmatch.fnmatchcase(info.name, pattern) for pattern in excluded)


def types_matching(requirements: Mapping[str, Any]) -> list[str]:
    """Return the known instance types that satisfy ``requirements``, in catalogue order."""
    return [name for name, info in INSTANCE_TYPES.items() if matches_requirements(info, requirements)]


@dataclass(frozen=True)
class Pool:
    """One spot pool as declared: its price, how many instances it can hold, how long they take to boot."""

    instance_type: str
    availability_zone: str
    spot_price: float  # USD per hour
    capacity: int  # spot instances the pool can hold at once
    boot_delay_seconds: float = 90.0  # before time scaling
    interruption_hazard_per_hour: float = 0.0
    # On-demand capacity is modelled apart: it is what a fallback policy reaches for when spot is gone.
    on_demand_capacity: int = 64

    @property
    def key(self) -> PoolKey:
        """The pool's (instance type, availability zone)."""
        return (self.instance_type, self.availability_zone)


def default_pools(seed: int = 0, zones: Sequence[str] = DEFAULT_ZONES) -> list[Pool]:
    """Return a plausible pool table for the GPU types of :mod:`spotrun.local.capacity.catalog`.

    Spot prices are 30-40 % of on-demand and differ per zone; large multi-GPU types have little capacity and
    boot slowly. The table is a pure function of ``seed``.

    Parameters
    ----------
    seed
        Seed of the random draws.
    zones
        Availability zones to create pools in.

    Returns
    -------
    list of Pool
        One pool per (type, zone).
    """
    rng = random.Random(seed)  # noqa: S311 - a simulation, not security
    pools = []
    for info in INSTANCE_TYPES.values():
        for zone in zones:
            fraction = rng.uniform(0.30, 0.40)
            if info.gpus >= 8:
                capacity, boot = rng.randint(1, 2), rng.uniform(180.0, 300.0)
            elif info.gpus >= 4:
                capacity, boot = rng.randint(2, 6), rng.uniform(120.0, 200.0)
            else:
                capacity, boot = rng.randint(6, 16), rng.uniform(60.0, 120.0)
            pools.append(
                Pool(
                    instance_type=info.name,
                    availability_zone=zone,
                    spot_price=round(info.on_demand_usd_per_hour * fraction, 4),
                    capacity=capacity,
                    boot_delay_seconds=round(boot, 1),
                    on_demand_capacity=max(4, capacity * 4),
                )
            )
    return pools

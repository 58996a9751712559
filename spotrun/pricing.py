"""On-demand prices of the GPU instance types spotrun knows, and what a job costs.

Pure: no AWS call happens here. The catalog is a static table of us-east-1 Linux on-demand list prices, used
for two things: ordering candidate instance types (cheapest first) and telling a user what the same
instance-seconds would have cost on demand, which is the saving spot bought them.

Prices change. The P4/P5 figures are the long-standing list prices (p4d.24xlarge 32.7726, p5.48xlarge 98.32
USD/h); AWS cut on-demand prices of P4 and P5 instances in June 2025, so savings against those figures read
higher than against today's on-demand price. Update the table, not the code, when prices move.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from spotrun.manifest import GpuName

# EC2 bills Linux instances per second with a one-minute minimum for each instance it starts.
BILLING_MINIMUM_SECONDS = 60
_SECONDS_PER_HOUR = 3600


@dataclass(frozen=True, slots=True)
class InstanceTypeInfo:
    """What spotrun knows about one GPU instance type.

    Attributes
    ----------
    name
        The EC2 instance type, e.g. ``g5.xlarge``.
    gpu_name
        The GPU model in lower case, as in the manifest's ``resources.gpu_names``.
    gpus
        GPUs on one instance.
    gpu_memory_gib
        Memory of each GPU in GiB, as AWS lists it for the type (e.g. 24 for an A10G).
    vcpus
        vCPUs on one instance.
    memory_gib
        Host memory of one instance, GiB.
    on_demand_usd_per_hour
        us-east-1 Linux on-demand list price, USD per instance-hour.
    """

    name: str
    gpu_name: GpuName
    gpus: int
    gpu_memory_gib: int
    vcpus: int
    memory_gib: int
    on_demand_usd_per_hour: float

    @property
    def family(self) -> str:
        """The part of the name before the dot, e.g. ``g5`` for ``g5.xlarge``."""
        return self.name.split(".", 1)[0]


# (name, gpu, gpus, GiB per GPU, vCPUs, memory GiB, on-demand USD/h), us-east-1, Linux.
_TABLE: tuple[tuple[str, GpuName, int, int, int, int, float], ...] = (
    # g4dn: NVIDIA T4, 16 GiB
    ("g4dn.xlarge", "t4", 1, 16, 4, 16, 0.526),
    ("g4dn.2xlarge", "t4", 1, 16, 8, 32, 0.752),
    ("g4dn.4xlarge", "t4", 1, 16, 16, 64, 1.204),
    ("g4dn.8xlarge", "t4", 1, 16, 32, 128, 2.176),
    ("g4dn.12xlarge", "t4", 4, 16, 48, 192, 3.912),
    ("g4dn.16xlarge", "t4", 1, 16, 64, 256, 4.352),
    ("g4dn.metal", "t4", 8, 16, 96, 384, 7.824),
    # g5: NVIDIA A10G, 24 GiB
    ("g5.xlarge", "a10g", 1, 24, 4, 16, 1.006),
    ("g5.2xlarge", "a10g", 1, 24, 8, 32, 1.212),
    ("g5.4xlarge", "a10g", 1, 24, 16, 64, 1.624),
    ("g5.8xlarge", "a10g", 1, 24, 32, 128, 2.448),
    ("g5.12xlarge", "a10g", 4, 24, 48, 192, 5.672),
    ("g5.16xlarge", "a10g", 1, 24, 64, 256, 4.096),
    ("g5.24xlarge", "a10g", 4, 24, 96, 384, 8.144),
    ("g5.48xlarge", "a10g", 8, 24, 192, 768, 16.288),
    # g6: NVIDIA L4, 24 GiB
    ("g6.xlarge", "l4", 1, 24, 4, 16, 0.8048),
    ("g6.2xlarge", "l4", 1, 24, 8, 32, 0.9776),
    ("g6.4xlarge", "l4", 1, 24, 16, 64, 1.3232),
    ("g6.8xlarge", "l4", 1, 24, 32, 128, 2.0144),
    ("g6.12xlarge", "l4", 4, 24, 48, 192, 4.6016),
    ("g6.16xlarge", "l4", 1, 24, 64, 256, 3.3968),
    ("g6.24xlarge", "l4", 4, 24, 96, 384, 6.6752),
    ("g6.48xlarge", "l4", 8, 24, 192, 768, 13.3504),
    # g6e: NVIDIA L40S, 48 GiB
    ("g6e.xlarge", "l40s", 1, 48, 4, 32, 1.861),
    ("g6e.2xlarge", "l40s", 1, 48, 8, 64, 2.24208),
    ("g6e.4xlarge", "l40s", 1, 48, 16, 128, 3.00424),
    ("g6e.8xlarge", "l40s", 1, 48, 32, 256, 4.52856),
    ("g6e.12xlarge", "l40s", 4, 48, 48, 384, 10.49264),
    ("g6e.16xlarge", "l40s", 1, 48, 64, 512, 7.57719),
    ("g6e.24xlarge", "l40s", 4, 48, 96, 768, 15.06559),
    ("g6e.48xlarge", "l40s", 8, 48, 192, 1536, 30.13118),
    # p3 / p3dn: NVIDIA V100, 16 GiB (32 GiB on p3dn)
    ("p3.2xlarge", "v100", 1, 16, 8, 61, 3.06),
    ("p3.8xlarge", "v100", 4, 16, 32, 244, 12.24),
    ("p3.16xlarge", "v100", 8, 16, 64, 488, 24.48),
    ("p3dn.24xlarge", "v100", 8, 32, 96, 768, 31.212),
    # p4d / p4de: NVIDIA A100, 40 GiB (80 GiB on p4de)
    ("p4d.24xlarge", "a100", 8, 40, 96, 1152, 32.7726),
    ("p4de.24xlarge", "a100", 8, 80, 96, 1152, 40.9657),
    # p5: NVIDIA H100, 80 GiB
    ("p5.48xlarge", "h100", 8, 80, 192, 2048, 98.32),
    # p5e: NVIDIA H200, 141 GiB. Sold mostly through Capacity Blocks; this on-demand figure is approximate.
    ("p5e.48xlarge", "h200", 8, 141, 192, 2048, 108.53),
)

GPU_CATALOG: Mapping[str, InstanceTypeInfo] = MappingProxyType(
    {row[0]: InstanceTypeInfo(*row) for row in _TABLE}
)
"""Every GPU instance type spotrun can place a job on, by name (read-only)."""


def instance_info(name: str) -> InstanceTypeInfo:
    """Look up an instance type in :data:`GPU_CATALOG`.

    Parameters
    ----------
    name
        An EC2 instance type such as ``g5.xlarge``.

    Returns
    -------
    InstanceTypeInfo
        Its GPUs, size and on-demand price.

    Raises
    ------
    KeyError
        When spotrun's catalog does not know the type; the message names it.
    """
    try:
        return GPU_CATALOG[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a GPU instance type in spotrun's catalog") from None


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


class CostedAttempt(Protocol):
    """The shape of one instance's run that :func:`job_cost` can price.

    ``spotrun.job.Attempt`` fits it; read-only properties let frozen models and dataclasses fit as well.
    One attempt is one instance: a multi-node run is priced as one attempt per instance.
    """

    @property
    def instance_type(self) -> str: ...

    @property
    def price_per_hour(self) -> float: ...

    @property
    def started_at(self) -> datetime: ...

    @property
    def ended_at(self) -> datetime | None: ...


class CostReport(BaseModel):
    """What a job cost, and what it would have cost on demand."""

    model_config = ConfigDict(frozen=True)

    usd: float = Field(description="What the job's instances cost, USD, rounded to 4 decimals.")
    on_demand_usd: float = Field(
        description="What the same instance-seconds would have cost on demand, USD, rounded to 4 decimals."
    )
    savings_pct: float = Field(description="1 - usd / on_demand_usd, in percent, rounded to 1 decimal.")


def job_cost(attempts: Iterable[CostedAttempt], *, now: datetime | None = None) -> CostReport:
    """Price a job's attempts, each billed per second with EC2's 60-second minimum.

    Parameters
    ----------
    attempts
        Every instance the job ran on, finished or not.
    now
        The end used for an attempt still running (``ended_at`` is None). Required only when one is.

    Returns
    -------
    CostReport
        Actual cost, on-demand equivalent and the saving. An instance type missing from the catalog is
        counted at its own price on both sides, so an unknown price never inflates the saving.

    Raises
    ------
    ValueError
        When an attempt is still running and ``now`` is not given, or for naive or inverted times.
    """
    usd = 0.0
    on_demand_usd = 0.0
    for attempt in attempts:
        ended_at = attempt.ended_at
        if ended_at is None:
            if now is None:
                raise ValueError(
                    f"an attempt on {attempt.instance_type} started at {attempt.started_at.isoformat()} is "
                    "still running: pass now= to cost it up to the present"
                )
            ended_at = now
        usd += usd_for(attempt.price_per_hour, attempt.started_at, ended_at)
        known = GPU_CATALOG.get(attempt.instance_type)
        on_demand_price = known.on_demand_usd_per_hour if known else attempt.price_per_hour
        on_demand_usd += usd_for(on_demand_price, attempt.started_at, ended_at)
    savings = (1 - usd / on_demand_usd) * 100 if on_demand_usd > 0 else 0.0
    # + 0.0 turns a rounded -0.0 into 0.0, which reads better in a report.
    return CostReport(
        usd=round(usd, 4), on_demand_usd=round(on_demand_usd, 4), savings_pct=round(savings, 1) + 0.0
    )

"""Where a job's instances come from: candidate instance types, pools to avoid, and the fallback policy.

Pure. The CreateFleet request and response over these candidates are :mod:`spotrun.model.capacity.fleet_request`'s.

A *pool* is an (instance type, availability zone) pair: spot capacity is reclaimed pool by pool, so after an
interruption the pool that was just reclaimed is left out of the next request for a while.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Literal, NamedTuple

from spotrun.model.capacity.pricing import GPU_CATALOG, InstanceTypeInfo
from spotrun.model.errors import ManifestInvalid
from spotrun.model.manifest.capacity import CapacityPolicy, Resources

# The deadline policy is loaded by a deadline job's caller, not by the job record's readers.
Lifecycle = Literal["spot", "on-demand"]
LIFECYCLES: tuple[Lifecycle, ...] = ("spot", "on-demand")


class Pool(NamedTuple):
    """A spot capacity pool: one instance type in one availability zone.

    A plain ``(instance_type, availability_zone)`` tuple compares and hashes equal to a Pool, so callers may
    pass either.
    """

    instance_type: str
    availability_zone: str

    def __str__(self) -> str:
        return f"{self.instance_type}/{self.availability_zone}"


def _describe_requirements(resources: Resources) -> str:
    parts = [f"exactly {resources.gpus_per_node} GPU(s) per node"]
    if resources.gpu_names:
        parts.append(f"GPU in {sorted(resources.gpu_names)}")
    if resources.gpu_memory_gib is not None:
        parts.append(f"at least {resources.gpu_memory_gib} GiB per GPU")
    return ", ".join(parts)


def _by_price(types: Iterable[InstanceTypeInfo]) -> list[InstanceTypeInfo]:
    # The name breaks ties so that the order, and with it the fleet request, is deterministic.
    return sorted(types, key=lambda info: (info.on_demand_usd_per_hour, info.name))


def _explicit_types(resources: Resources, names: Sequence[str]) -> list[InstanceTypeInfo]:
    unknown = [name for name in dict.fromkeys(names) if name not in GPU_CATALOG]
    if unknown:
        # Unknown types are refused rather than passed through: spotrun could not check their GPU count or
        # memory against resources, nor price them. A new type is one row in spotrun.model.capacity.pricing's table.
        families = sorted({info.family for info in GPU_CATALOG.values()})
        raise ManifestInvalid(
            f"resources.instance_types: {', '.join(unknown)} not in spotrun's GPU catalog "
            f"(known families: {', '.join(families)}); use resources.gpu_names or a listed type"
        )
    problems: list[str] = []
    chosen: list[InstanceTypeInfo] = []
    for name in dict.fromkeys(names):
        info = GPU_CATALOG[name]
        if info.gpus != resources.gpus_per_node:
            problems.append(
                f"{name} has {info.gpus} GPU(s), resources.gpus_per_node is {resources.gpus_per_node}"
            )
        elif resources.gpu_memory_gib is not None and info.gpu_memory_gib < resources.gpu_memory_gib:
            problems.append(
                f"{name} has {info.gpu_memory_gib} GiB per GPU, "
                f"resources.gpu_memory_gib asks at least {resources.gpu_memory_gib}"
            )
        else:
            chosen.append(info)
    if problems:
        # An explicit list is the user's own choice: a type that contradicts the rest of resources is a
        # mistake to report, not one to drop silently.
        raise ManifestInvalid("resources.instance_types: " + "; ".join(problems))
    return _by_price(chosen)


def _gpu_fits(info: InstanceTypeInfo, resources: Resources) -> bool:
    """The type's GPU model and per-GPU memory are acceptable (the GPU count aside)."""
    return (not resources.gpu_names or info.gpu_name in resources.gpu_names) and (
        resources.gpu_memory_gib is None or info.gpu_memory_gib >= resources.gpu_memory_gib
    )


def _no_match_message(resources: Resources) -> str:
    wanted = f"resources: no GPU instance type in spotrun's catalog has {_describe_requirements(resources)}"
    eligible = [info for info in GPU_CATALOG.values() if _gpu_fits(info, resources)]
    if eligible:
        # Only the GPU count excluded them: say which counts exist, the likely fix.
        counts = sorted({info.gpus for info in eligible})
        listed = ", ".join(map(str, counts[:-1])) + (" or " if len(counts) > 1 else "") + str(counts[-1])
        return f"{wanted}: instances with such GPUs carry {listed} of them"
    named = [
        info
        for info in GPU_CATALOG.values()
        if not resources.gpu_names or info.gpu_name in resources.gpu_names
    ]
    largest = max(info.gpu_memory_gib for info in named)
    return f"{wanted}: the largest of those GPUs has {largest} GiB"


def candidate_types(resources: Resources) -> list[InstanceTypeInfo]:
    """The instance types a job may run on, cheapest on-demand price first.

    With ``resources.instance_types`` the list is taken as given, but every type must be in
    :data:`spotrun.model.capacity.pricing.GPU_CATALOG` and agree with ``gpus_per_node`` and
    ``gpu_memory_gib``. Otherwise every catalog type qualifies whose GPU is in ``gpu_names`` (any GPU when
    not given), whose GPU count equals ``gpus_per_node`` exactly (a one-GPU job must not rent an eight-GPU
    box) and whose per-GPU memory is at least ``gpu_memory_gib``.

    Parameters
    ----------
    resources
        The manifest's ``resources`` section.

    Returns
    -------
    list[InstanceTypeInfo]
        At least one type, sorted by on-demand price, then name.

    Raises
    ------
    ManifestInvalid
        When an explicit type is unknown or contradicts ``resources``, or when no catalog type matches; the
        message says which requirement excluded what.
    """
    if resources.instance_types:
        return _explicit_types(resources, resources.instance_types)
    matching = [
        info
        for info in GPU_CATALOG.values()
        if _gpu_fits(info, resources) and info.gpus == resources.gpus_per_node
    ]
    if not matching:
        raise ManifestInvalid(_no_match_message(resources))
    return _by_price(matching)


def avoid_list(
    reclaimed: Iterable[tuple[tuple[str, str], datetime]], now: datetime, minutes: int
) -> set[Pool]:
    """The pools reclaimed less than ``minutes`` ago, to leave out of the next request.

    Parameters
    ----------
    reclaimed
        ``(pool, reclaimed_at)`` pairs, e.g. from a job's past attempts; a pool may appear several times.
    now
        The present, timezone-aware like the ``reclaimed_at`` values.
    minutes
        How long a reclaimed pool is avoided (the manifest's ``capacity.avoid_pool_minutes``); 0 avoids none.

    Returns
    -------
    set[Pool]
        The pools still inside their avoidance window.
    """
    window = timedelta(minutes=minutes)
    # A reclaim stamped slightly in the future (clock skew between services) is recent, not expired.
    return {Pool(*pool) for pool, reclaimed_at in reclaimed if now - reclaimed_at < window}


def choose_lifecycle(
    policy: CapacityPolicy,
    interruptions_so_far: int,
    spot_unavailable: bool,
    decided: Lifecycle | None = None,
) -> Lifecycle:
    """Decide whether the next attempt buys spot or on-demand capacity.

    Parameters
    ----------
    policy
        The manifest's ``capacity`` section.
    interruptions_so_far
        Spot interruptions the job has had.
    spot_unavailable
        True when the last spot request found no capacity.
    decided
        With ``capacity.deadline``, the lifecycle of the deadline policy's decision
        (:meth:`spotrun.model.deadline.state.Decision.lifecycle`), which replaces the fallback rules (the manifest
        refuses both together).

    Returns
    -------
    Lifecycle
        ``decided`` when given; else ``"on-demand"`` when spot is off, or when on-demand
        fallback is on and either the job was interrupted ``fallback_after_interruptions`` times or spot is
        unavailable; ``"spot"`` otherwise.
    """
    if decided is not None:
        return decided
    if not policy.spot:
        return "on-demand"
    if policy.on_demand_fallback and (
        interruptions_so_far >= policy.fallback_after_interruptions or spot_unavailable
    ):
        return "on-demand"
    return "spot"

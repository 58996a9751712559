"""The plan before paying: where a manifest's job would run, at what price, and why it would be refused.

``spotrun plan FILE``, ``spotrun submit --dry-run`` and ``POST /plan`` answer it; nothing is bought, recorded or
started. The pools come in the order acquisition would try them: the same request
(:func:`spotrun.model.capacity.fleet_request.request_pools`, which
:func:`spotrun.control.capacity.acquire.launch_instance`'s fleet request is built from) ordered as EC2
allocates it (:func:`spotrun.model.capacity.fleet_order.try_order`), and the same lifecycle choice
(:func:`spotrun.model.capacity.candidates.choose_lifecycle`, the deadline policy's first decision when
``capacity.deadline`` is set). Prices are today's: the spot price from the same source acquisition records an
attempt's price from (EC2's spot price history; ``Compute.spot_prices``, one query), the on-demand price from
:mod:`spotrun.model.capacity.pricing`'s table. The problems are every admission problem of ``POST /jobs``
(:func:`spotrun.control.submission.entry_problems`), inputs and code that do not exist included.

A multi-node job's fleet request asks for all its nodes in one pool (one type, one zone, all or nothing), so each
pool is a place the whole group can land, priced per node and per group-hour; whether the nodes get an EFA is
the rule the launch template is chosen by (:func:`spotrun.model.capacity.group_launch.uses_efa`).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from spotrun.control.ports import Compute, Objects
from spotrun.control.submission import api_source, entry_problems
from spotrun.control.views.plan_model import CostEstimate, GroupPlan, JobPlan, PlannedPool, SkippedPool
from spotrun.model.capacity.candidates import Lifecycle, candidate_types, choose_lifecycle
from spotrun.model.capacity.fleet_order import try_order
from spotrun.model.capacity.fleet_request import request_pools
from spotrun.model.capacity.group_launch import uses_efa
from spotrun.model.capacity.pricing import InstanceTypeInfo, on_demand_price, region_of_zone
from spotrun.model.deadline.state import Choice, Decision, Running
from spotrun.model.deadline.stored_job import ASSUMED, decide_for_job, feasibility_note, slack_text
from spotrun.model.errors import ManifestInvalid
from spotrun.model.job.ids import job_id_for
from spotrun.model.job.record import new_job
from spotrun.model.manifest.schema import JobManifest

_SECONDS_PER_HOUR = 3600
_BILLING_MINIMUM_HOURS = 60 / _SECONDS_PER_HOUR  # EC2 bills each instance at least a minute


def _first_decision(manifest: JobManifest, now: datetime, spot: bool, time_scale: float) -> Decision:
    # The policy decides on the job's record: a new job's, as submission would make it.
    source = api_source(manifest, None)
    job = new_job(job_id_for(manifest.name, source), manifest.name, source, manifest, now)
    return decide_for_job(
        job, now, running=Running.NOTHING, spot_available=spot, assumed=ASSUMED.scaled(time_scale)
    )


def _lifecycles(
    manifest: JobManifest, now: datetime, time_scale: float, has_candidates: bool
) -> tuple[Lifecycle | None, Lifecycle | None, str | None]:
    """(first, fallback, deadline note), as :func:`~spotrun.control.capacity.acquire.launch_instance` chooses them.

    Without a candidate type (a problem already) the deadline policy has no price to decide on: no note.
    """
    policy = manifest.capacity
    note = None
    decision = fallback_decision = None
    if policy.deadline is not None and has_candidates:
        decision = _first_decision(manifest, now, True, time_scale)
        note = f"{decision.choice.value}, {slack_text(decision)} ({decision.reason})"
        unchecked = feasibility_note(manifest)
        if unchecked is not None:  # training.total_steps: no hours to check the deadline against yet
            note = f"{unchecked}; first decision: {note}"
        if decision.choice is Choice.WAIT:
            return None, None, note
        fallback_decision = _first_decision(manifest, now, False, time_scale)
    first = choose_lifecycle(
        policy, 0, spot_unavailable=False, decided=decision.lifecycle() if decision else None
    )
    if fallback_decision is not None and fallback_decision.choice is Choice.WAIT:
        return first, None, note
    fallback = choose_lifecycle(
        policy, 0, spot_unavailable=True, decided=fallback_decision.lifecycle() if fallback_decision else None
    )
    return first, (fallback if fallback != first else None), note


def _ordered(
    lifecycle: Lifecycle,
    pools: list[tuple[InstanceTypeInfo, str, str]],
    spot: dict[tuple[str, str], float | None],
    max_price: float | None,
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    keys = [(info.name, zone) for info, _subnet, zone in pools]

    def on_demand(key: tuple[str, str]) -> float | None:
        return on_demand_price(key[0], region_of_zone(key[1]))

    if lifecycle == "on-demand":
        return try_order(keys, on_demand)
    return try_order(keys, lambda key: spot[key], lambda key: max_price or on_demand(key))


def plan_job(
    manifest: JobManifest,
    *,
    compute: Compute,
    objects: Objects,
    subnet_ids: tuple[str, ...],
    archive_buckets: Collection[str],
    jobs_bucket: str,
    now: datetime,
    time_scale: float,
    secret_references: Collection[str] = (),
) -> JobPlan:
    """The plan of a validated manifest: pools in order, prices, the estimate and every admission problem.

    Parameters
    ----------
    manifest
        A manifest that passed validation.
    compute
        Port to EC2: the subnets' zones and today's spot prices (read only; nothing is launched).
    objects
        Port to S3: do the inputs and the code exist (listed only)?
    subnet_ids
        The deployment's subnets, which fleet requests name.
    archive_buckets, jobs_bucket, now, time_scale, secret_references
        As for :func:`spotrun.control.submission.submit_api_manifest`.

    Returns
    -------
    JobPlan
        The plan; ``ok`` is False when POST /jobs would refuse the manifest, each reason in ``problems``.
    """
    problems = entry_problems(
        manifest,
        objects=objects,
        archive_buckets=archive_buckets,
        jobs_bucket=jobs_bucket,
        now=now,
        time_scale=time_scale,
        secret_references=secret_references,
    )
    nodes = manifest.resources.nodes
    try:
        candidates = candidate_types(manifest.resources)
    except ManifestInvalid:
        candidates = []  # already among the problems (resources: ...)
    first, fallback, note = _lifecycles(manifest, now, time_scale, bool(candidates))
    pools = request_pools(candidates, compute.subnet_zones(subnet_ids)) if candidates else []
    today = compute.spot_prices([info.name for info in candidates]) if pools else {}
    spot_prices = {(info.name, zone): today.get((info.name, zone)) for info, _subnet, zone in pools}
    planned: list[PlannedPool] = []
    skipped: list[SkippedPool] = []
    max_price = manifest.capacity.max_price_per_hour
    for lifecycle in [choice for choice in (first, fallback) if choice is not None]:
        tried, over = _ordered(lifecycle, pools, spot_prices, max_price)
        for instance_type, zone in tried:
            spot_price = spot_prices[(instance_type, zone)]
            listed_price = on_demand_price(instance_type, region_of_zone(zone))
            planned.append(
                PlannedPool(
                    order=len(planned) + 1,
                    instance_type=instance_type,
                    availability_zone=zone,
                    lifecycle=lifecycle,
                    spot_price_per_hour=spot_price,
                    on_demand_price_per_hour=listed_price,
                    first=not planned,
                    group_spot_price_per_hour=_times(spot_price, nodes),
                    group_on_demand_price_per_hour=_times(listed_price, nodes),
                )
            )
        for instance_type, zone in over:
            listed = on_demand_price(instance_type, region_of_zone(zone))
            skipped.append(
                SkippedPool(
                    instance_type=instance_type,
                    availability_zone=zone,
                    spot_price_per_hour=spot_prices[(instance_type, zone)] or 0.0,
                    limit_per_hour=max_price or listed or 0.0,
                )
            )
    return JobPlan(
        name=manifest.name,
        nodes=nodes,
        lifecycle=first,
        fallback=fallback,
        pools=planned,
        skipped=skipped,
        first_pool=planned[0] if planned else None,
        estimate=_estimate(manifest, planned),
        group=_group(manifest, candidates),
        deadline=note,
        gpu_idle=_gpu_idle(manifest),
        problems=problems,
        ok=not problems,
    )


def _times(price: float | None, nodes: int) -> float | None:
    return None if price is None else round(price * nodes, 6)


def _group(manifest: JobManifest, candidates: list[InstanceTypeInfo]) -> GroupPlan | None:
    """How a multi-node job's group lands: None for one node."""
    nodes = manifest.resources.nodes
    if nodes < 2:
        return None
    hang = manifest.hang_seconds
    return GroupPlan(
        nodes=nodes,
        efa=uses_efa(candidates, nodes=nodes, efa_wanted=manifest.resources.efa),
        efa_requested=manifest.resources.efa,
        types_without_efa=[info.name for info in candidates if not info.efa],
        replace_node_minutes=manifest.capacity.replace_node_minutes,
        hang_minutes=None if hang is None else hang / 60,
    )


def _gpu_idle(manifest: JobManifest) -> str | None:
    """``"every GPU of a node below 10 % for 15 min: the job fails"``; None without training.gpu_idle."""
    policy = manifest.training.gpu_idle
    if policy is None:
        return None
    then = (
        "the job fails, its instances released"
        if policy.action == "fail"
        else "the idle instance is terminated and the job relaunched from its last checkpoint"
    )
    return f"every GPU of a node below {policy.utilization_below:g} % for {policy.minutes:g} min: {then}"


def _estimate(manifest: JobManifest, planned: list[PlannedPool]) -> CostEstimate | None:
    hours = manifest.training.expected_hours
    if hours is None:
        return None
    billed = max(hours, _BILLING_MINIMUM_HOURS) * manifest.resources.nodes
    spot = next((pool for pool in planned if pool.lifecycle == "spot"), None)
    # The cheapest on-demand pool, whether or not the plan falls back on it: what spot is compared with.
    listed = [pool.on_demand_price_per_hour for pool in planned if pool.on_demand_price_per_hour is not None]
    return CostEstimate(
        hours=hours,
        nodes=manifest.resources.nodes,
        spot_usd=None
        if spot is None or spot.spot_price_per_hour is None
        else round(spot.spot_price_per_hour * billed, 4),
        on_demand_usd=round(min(listed) * billed, 4) if listed else None,
    )

"""Launching the instances of a job's next attempt: spot or on-demand as its policy decides, one instance or a
whole group in one pool, priced; :mod:`spotrun.control.capacity.acquire` records them."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from spotrun.control.capacity.fleet import NO_GROUP, GroupSite, launch_fleet
from spotrun.control.ports import Compute
from spotrun.model.capacity.candidates import Lifecycle, Pool, avoid_list, candidate_types, choose_lifecycle
from spotrun.model.capacity.fleet_request import FleetLaunchError, LaunchedInstance
from spotrun.model.capacity.pricing import PriceSource, attempt_price
from spotrun.model.deadline.state import Choice, Decision, Running
from spotrun.model.deadline.stored_job import (
    ASSUMED,
    DeadlineAssumptions,
    decide_for_job,
    decision_note,
    with_decision,
)
from spotrun.model.errors import (
    CapacityConfigurationError,
    CapacityQuotaExceeded,
    CapacityUnavailable,
)
from spotrun.model.job.attempt import INTERRUPTION_REASONS, Attempt, NodeRun
from spotrun.model.job.record import Job
from spotrun.model.layout import ATTEMPT_TAG, JOB_ID_TAG

# A launch that could not give an instance, for a reason waiting cannot fix.
REFUSED = (CapacityQuotaExceeded, CapacityConfigurationError)


def launch_instance(
    job: Job,
    *,
    compute: Compute,
    subnet_ids: tuple[str, ...],
    launch_template_name: str,
    interruptions: int,
    now: datetime,
    also_avoid: Collection[Pool] = (),
    decisions: list[Decision] | None = None,
    assumed: DeadlineAssumptions = ASSUMED,
    failures: list[FleetLaunchError] | None = None,
    lifecycle: Lifecycle | None = None,
    group: GroupSite = NO_GROUP,
) -> Attempt:
    """Launch capacity for the job's next attempt, without recording it.

    Spot first (unless the policy says otherwise), over every candidate type and zone except the pools reclaimed
    lately; on-demand when spot is unavailable and the manifest allows the fallback.

    Parameters
    ----------
    job
        The job (its manifest and past attempts decide types, pools to avoid and lifecycle).
    compute
        Port to EC2.
    subnet_ids, launch_template_name
        Where and how instances are launched.
    interruptions
        Interruptions to count for the on-demand fallback policy.
    now
        The current time.
    also_avoid
        Pools to avoid besides the recently reclaimed ones (the pool being reclaimed right now).
    decisions
        With ``capacity.deadline``, receives the deadline policy's decisions, in order, for the caller to record
        (one, or two when spot was chosen and found none). A decision to wait raises ``CapacityUnavailable``.
    assumed
        The deadline policy's assumed durations, scaled for the emulator.
    failures
        Receives the errors of every CreateFleet call made (spot's, then on-demand's when it fell back), for the
        caller to record why the job waits.
    lifecycle
        A lifecycle decided already (the deadline's return to spot,
        :mod:`spotrun.control.capacity.deadline_moves`): that one only, without a decision of the deadline
        policy's and without the on-demand fallback.
    group
        For a multi-node job: the placement groups and the EFA launch template (:class:`GroupSite`).

    Returns
    -------
    Attempt
        The launched instance as the job's next attempt, started ``now``; for several nodes, all of them in one
        pool and placement group (:attr:`Attempt.nodes`).

    Raises
    ------
    CapacityUnavailable
        When no pool could supply an instance.
    CapacityQuotaExceeded, CapacityConfigurationError
        When EC2 refused the launch for a reason waiting cannot fix (see :mod:`spotrun.model.capacity.fleet_errors`).
    """
    manifest = job.require_manifest()
    subnets = compute.subnet_zones(subnet_ids)
    reclaimed = [
        ((attempt.instance_type, attempt.availability_zone), attempt.ended_at)
        for attempt in job.attempts
        if attempt.end_reason in INTERRUPTION_REASONS and attempt.ended_at is not None
    ]
    avoid = avoid_list(reclaimed, now, manifest.capacity.avoid_pool_minutes) | set(also_avoid)
    tags = {**manifest.tags, JOB_ID_TAG: job.job_id, ATTEMPT_TAG: str(len(job.attempts) + 1)}

    nodes = manifest.resources.nodes
    candidates = candidate_types(manifest.resources)
    template = group.template(candidates, nodes, manifest.resources.efa, launch_template_name)
    efa = nodes > 1 and template == group.efa_launch_template_name

    def launch(chosen: Lifecycle) -> list[LaunchedInstance]:
        return launch_fleet(
            compute,
            candidates=candidates,
            subnets=subnets,
            launch_template_name=template,
            placement_groups=group.placements(subnets, nodes),
            lifecycle=chosen,
            max_price_per_hour=manifest.capacity.max_price_per_hour,
            avoid_pools=avoid,
            nodes=nodes,
            tags=tags,
            failures=failures,
        )

    if lifecycle is not None:
        return _attempt(job, launch(lifecycle), compute, now, efa)
    decision = None
    if manifest.capacity.deadline is not None:
        # Spot's availability is learnt by asking for it: the policy first decides as if spot were there, and
        # again, knowing it is not, when the spot request finds no capacity.
        decision = _decide(job, now, True, decisions, assumed)
    lifecycle = choose_lifecycle(
        manifest.capacity,
        interruptions,
        spot_unavailable=False,
        decided=decision.lifecycle() if decision else None,
    )
    try:
        launched = launch(lifecycle)
    except (CapacityUnavailable, CapacityQuotaExceeded):
        # A Spot quota (or no Spot capacity) is what the on-demand fallback is for; a configuration error
        # would fail on-demand alike.
        if decision is not None and lifecycle == "spot":
            decision = _decide(job, now, False, decisions, assumed)
        fallback = choose_lifecycle(
            manifest.capacity,
            interruptions,
            spot_unavailable=True,
            decided=decision.lifecycle() if decision else None,
        )
        if fallback == lifecycle:
            raise
        launched = launch(fallback)
    return _attempt(job, launched, compute, now, efa)


def _attempt(
    job: Job, launched: list[LaunchedInstance], compute: Compute, now: datetime, efa: bool
) -> Attempt:
    # The launched instances as the job's next attempt, priced (a group's nodes numbered in launch order until
    # their addresses are known: spotrun.model.job.group.ordered_by_address).
    first = launched[0]
    nodes = (
        [
            NodeRun(node=index, instance_id=instance.instance_id, started_at=now)
            for index, instance in enumerate(launched)
        ]
        if len(launched) > 1
        else []
    )
    price, source = pool_price(compute, first.lifecycle, first.pool)
    return Attempt(
        number=len(job.attempts) + 1,
        instance_id=first.instance_id,
        instance_type=first.instance_type,
        availability_zone=first.availability_zone,
        lifecycle=first.lifecycle,
        price_per_hour=price,
        price_source=source,
        started_at=now,
        nodes=nodes,
        efa=efa,
    )


def pool_price(compute: Compute, lifecycle: Lifecycle, pool: Pool) -> tuple[float | None, PriceSource]:
    """What an instance of ``pool`` costs per hour bought as ``lifecycle``, and where the figure comes from."""
    spot_price = compute.spot_price(*pool) if lifecycle == "spot" else None
    return attempt_price(
        lifecycle=lifecycle,
        instance_type=pool.instance_type,
        availability_zone=pool.availability_zone,
        spot_price=spot_price,
    )


def _decide(
    job: Job,
    now: datetime,
    spot_available: bool,
    decisions: list[Decision] | None,
    assumed: DeadlineAssumptions,
) -> Decision:
    decision = decide_for_job(
        job, now, running=Running.NOTHING, spot_available=spot_available, assumed=assumed
    )
    if decisions is not None:
        decisions.append(decision)
    if decision.choice is Choice.WAIT:
        raise CapacityUnavailable(decision_note(decision))
    return decision


def record_decisions(job: Job, decisions: list[Decision], now: datetime) -> Job:
    # The acquisition's final decision (a spot found missing is decided again: the second one stands).
    return with_decision(job, decisions[-1], now) if decisions else job

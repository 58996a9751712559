"""Capacity for a job's attempts: acquire an instance (a new one, or the standby of
:mod:`spotrun.control.capacity.standby`); :mod:`spotrun.control.capacity.release` lets them go."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from spotrun.control.capacity.fleet import NO_GROUP, GroupSite, launch_fleet
from spotrun.control.capacity.group import rebuild_group
from spotrun.control.capacity.readiness import not_visible_yet
from spotrun.control.ports import Compute, JobStore
from spotrun.control.store import update_job
from spotrun.model.capacity.candidates import Lifecycle, Pool, avoid_list, candidate_types, choose_lifecycle
from spotrun.model.capacity.fleet_request import FleetLaunchError, LaunchedInstance
from spotrun.model.capacity.pricing import attempt_price
from spotrun.model.capacity.wait import check_max_wait, still_waiting, waited_seconds
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
    InstanceLost,
)
from spotrun.model.job.attempt import INTERRUPTION_REASONS, Attempt, NodeRun
from spotrun.model.job.group import group_note
from spotrun.model.job.limits import next_attempt_refusal
from spotrun.model.job.record import Job, JobStatus, StatusChange, transition
from spotrun.model.job.standby import retire_standby, standby_in_flight
from spotrun.model.layout import ATTEMPT_TAG, JOB_ID_TAG
from spotrun.model.timing import WorkflowTiming

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
    spot_price = (
        compute.spot_price(first.instance_type, first.availability_zone)
        if first.lifecycle == "spot"
        else None
    )
    price, source = attempt_price(
        lifecycle=first.lifecycle,
        instance_type=first.instance_type,
        availability_zone=first.availability_zone,
        spot_price=spot_price,
    )
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


def acquire_instance(
    *,
    job_id: str,
    store: JobStore,
    compute: Compute,
    subnet_ids: tuple[str, ...],
    launch_template_name: str,
    timing: WorkflowTiming,
    now: datetime,
    group: GroupSite = NO_GROUP,
) -> Attempt:
    """Give the job's next attempt an instance: the standby (:mod:`spotrun.control.capacity.standby`), or a new one.

    A multi-node job's attempt gets all its nodes: the nodes its last attempt kept, the standby and new nodes in
    their pool (:func:`spotrun.control.capacity.group.rebuild_group`), or a whole new group in one pool.

    Parameters
    ----------
    job_id
        The job.
    store, compute
        Ports to the job store and EC2.
    subnet_ids, launch_template_name
        Where and how instances are launched.
    timing
        The workflow's timing (how long to keep waiting for capacity, and for a lost node's replacement).
    now
        The current time.
    group
        The deployment's placement groups and EFA template, for a multi-node job.

    Returns
    -------
    Attempt
        The new attempt. A retried call whose attempt is still open returns that attempt and launches nothing.

    Raises
    ------
    CapacityUnavailable
        When no pool could supply an instance; the workflow waits and calls again. The record keeps the wait
        (since when, each pool's last error), and the timeline notes its start once. Also, with nothing
        recorded, while the warning's standby is still being launched
        (:func:`spotrun.model.job.standby.standby_in_flight`): the next call adopts it.
    CapacityMaxWaitExceeded
        When the job has waited for capacity, over all its waits, longer than the timing's patience
        (``capacity.max_wait_minutes``); the wait stays on the record.
    CapacityQuotaExceeded, CapacityConfigurationError
        At once, without waiting, when EC2 refused the launch for a quota or the request's configuration.
    """
    job = store.get(job_id)
    if job is None:
        raise InstanceLost(f"no job {job_id}")
    existing = job.open_attempt
    if existing is not None:
        return existing
    if standby_in_flight(job, now):
        # The workflow waits (capacity_retry_seconds) and calls again: the standby is then stored, or given up.
        raise CapacityUnavailable(
            f"job {job_id}: the replacement launched on the warning is still being launched"
        )
    refusal = next_attempt_refusal(job, interruptions=job.interruptions, now=now)
    if refusal is not None:  # budget or training time used up: Budget.Exceeded / Training.MaxRuntimeExceeded
        raise refusal
    job = update_job(store, job_id, lambda current: transition(current, JobStatus.ACQUIRING, now))
    decisions: list[Decision] = []
    failures: list[FleetLaunchError] = []
    also_avoid: set[Pool] = set()
    try:
        if job.require_manifest().resources.nodes > 1:
            attempt, also_avoid = rebuild_group(
                job,
                store=store,
                compute=compute,
                subnet_ids=subnet_ids,
                launch_template_name=launch_template_name,
                site=group,
                timing=timing,
                now=now,
                failures=failures,
            )
        else:
            attempt = _adopt_standby(job, compute, now)
    except CapacityUnavailable as exc:
        _wait(store, job_id, decisions, failures, timing, now, str(exc))
        raise
    if attempt is None:
        try:
            attempt = launch_instance(
                job,
                compute=compute,
                subnet_ids=subnet_ids,
                launch_template_name=launch_template_name,
                interruptions=job.interruptions,
                now=now,
                also_avoid=also_avoid,
                decisions=decisions,
                assumed=ASSUMED.scaled(timing.time_scale),
                failures=failures,
                group=group,
            )
        except CapacityUnavailable as exc:
            _wait(store, job_id, decisions, failures, timing, now, str(exc))
            raise
        for instance_id in attempt.instance_ids():
            store.link_instance(instance_id, job_id)
    chosen = attempt
    standby = job.standby
    adopted = standby.instance_id if standby and standby.instance_id in chosen.instance_ids() else None
    if standby is not None and adopted is None and chosen.group:
        compute.terminate([standby.instance_id])  # launched in the zone the group left

    def record(current: Job) -> Job:
        where = group_note(chosen)
        if adopted is not None and not chosen.group:
            moved = bool(current.attempts) and current.attempts[-1].deadline_move
            where += " (launched for the return to spot)" if moved else " (launched on the warning)"
        if decisions:
            where += f"; {decision_note(decisions[-1])}"
        wait = current.capacity_wait
        if wait is not None:
            where += f"; after waiting {(now - wait.since).total_seconds() / 60:.1f} min for capacity"
        booting = transition(record_decisions(current, decisions, now), JobStatus.BOOTING, now, detail=where)
        # A standby not adopted (reclaimed before this attempt) still ran: it stays in the bill.
        booting = retire_standby(booting, now, adopted=adopted)
        # The wait ends: its pools' errors go, its duration adds to what max_wait_minutes counts.
        return booting.model_copy(
            update={
                "attempts": [*current.attempts, chosen],
                "capacity_wait": None,
                "capacity_waited_seconds": waited_seconds(wait, current.capacity_waited_seconds, now),
            }
        )

    update_job(store, job_id, record)
    return attempt


def _wait(
    store: JobStore,
    job_id: str,
    decisions: list[Decision],
    failures: list[FleetLaunchError],
    timing: WorkflowTiming,
    now: datetime,
    reason: str,
) -> None:
    # Record one more launch that found no capacity; past the job's patience, CapacityMaxWaitExceeded.
    deadline_wait = bool(decisions) and decisions[-1].choice is Choice.WAIT
    # The deadline policy's decision says why it waits; without pools' errors, the exception does.
    note = reason if deadline_wait or not failures else None
    job = update_job(
        store,
        job_id,
        lambda current: _note_wait(record_decisions(current, decisions, now), failures, now, note),
    )
    # A deadline's wait is bounded by the deadline itself (the policy moves to on-demand in time): the
    # patience meant for jobs without one does not end it.
    if not deadline_wait and job.capacity_wait is not None:
        check_max_wait(
            job.capacity_wait, job.capacity_waited_seconds, timing.capacity_patience_seconds, now, job_id
        )


def _adopt_standby(job: Job, compute: Compute, now: datetime) -> Attempt | None:
    standby = job.standby
    if standby is None:
        return None
    state = compute.instance_state(standby.instance_id)
    if state in ("pending", "running") or (state is None and not_visible_yet(standby.started_at, now)):
        # Unknown to EC2 just after its launch: it exists (CreateFleet said so); check_ready waits for it.
        return standby.model_copy(update={"number": len(job.attempts) + 1})
    return None


def _note_wait(job: Job, failures: list[FleetLaunchError], now: datetime, note: str | None) -> Job:
    # One more launch found no capacity: keep each pool's newest error; a new wait goes on the timeline once.
    wait = still_waiting(job.capacity_wait, failures, now, note)
    update: dict[str, object] = {"capacity_wait": wait}
    if job.capacity_wait is None:
        began = StatusChange(status=job.status, at=now, detail=f"waiting for capacity: {wait.reasons()}")
        update |= {"timeline": [*job.timeline, began], "updated_at": now}
    return job.model_copy(update=update)

"""Capacity for a job's attempts: acquire its instances (new ones from :mod:`spotrun.control.capacity.launch`,
the standby of :mod:`spotrun.control.capacity.standby`, or a group's kept nodes from
:mod:`spotrun.control.capacity.group`); :mod:`spotrun.control.capacity.release` lets them go."""

from __future__ import annotations

from datetime import datetime

from spotrun.control.capacity.fleet import NO_GROUP, GroupSite
from spotrun.control.capacity.group import rebuild_group
from spotrun.control.capacity.launch import launch_instance, record_decisions
from spotrun.control.capacity.readiness import not_visible_yet
from spotrun.control.ports import Compute, JobStore
from spotrun.control.store import update_job
from spotrun.model.capacity.candidates import Pool
from spotrun.model.capacity.fleet_request import FleetLaunchError
from spotrun.model.capacity.wait import check_max_wait, still_waiting, waited_seconds
from spotrun.model.deadline.state import Choice, Decision
from spotrun.model.deadline.stored_job import (
    ASSUMED,
    decision_note,
)
from spotrun.model.errors import (
    CapacityUnavailable,
    InstanceLost,
)
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.group import group_note
from spotrun.model.job.limits import next_attempt_refusal
from spotrun.model.job.record import Job, JobStatus, StatusChange, transition
from spotrun.model.job.standby import retire_standby, standby_in_flight
from spotrun.model.timing import WorkflowTiming


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

"""Standbys: an instance launched before the attempt it will host, so that its boot overlaps the old one's end.

Two moments launch one: EC2's interruption warning (the replacement boots while the checkpoint uploads), and the
deadline policy's return from on-demand to spot (:mod:`spotrun.control.capacity.deadline_moves`: the spot
instance is had before the on-demand one is let go). The next acquisition adopts it
(:func:`spotrun.control.capacity.acquire.acquire_instance`); one never adopted stays in the bill
(:mod:`spotrun.model.job.standby`).
"""

from __future__ import annotations

from datetime import datetime

from spotrun.control.capacity.fleet import NO_GROUP, GroupSite
from spotrun.control.capacity.group import launch_in_pool
from spotrun.control.capacity.launch import REFUSED, launch_instance, record_decisions
from spotrun.control.ports import Compute, JobStore
from spotrun.control.store import update_job
from spotrun.model.capacity.candidates import Lifecycle, Pool
from spotrun.model.deadline.state import Decision
from spotrun.model.deadline.stored_job import ASSUMED, DeadlineAssumptions
from spotrun.model.errors import CapacityUnavailable
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.limits import next_attempt_refusal
from spotrun.model.job.record import Job
from spotrun.model.job.standby import keep_unused


def launch_standby(
    *,
    job_id: str,
    store: JobStore,
    compute: Compute,
    subnet_ids: tuple[str, ...],
    launch_template_name: str,
    now: datetime,
    assumed: DeadlineAssumptions = ASSUMED,
    lifecycle: Lifecycle | None = None,
    group: GroupSite = NO_GROUP,
) -> Attempt | None:
    """Launch the job's next instance now, while its current attempt still runs, and keep it as the standby.

    On an interruption warning (``lifecycle`` None) the next attempt counts the interruption, the pool being
    reclaimed is avoided, and with ``capacity.deadline`` the lifecycle is the deadline policy's (decided with the
    ``assumed`` durations, and recorded). For the deadline's return to spot (``lifecycle="spot"``) there is no
    interruption and no decision to take: spot only, in any pool, and nothing when there is none. At most one
    standby exists per job: when two launches race, the loser terminates what it launched.

    Returns
    -------
    Attempt | None
        The standby, or None when the job has one already, is finished, or no capacity was found (the
        workflow will then acquire capacity itself after the attempt ends).
    """
    job = store.get(job_id)
    current = None if job is None else job.open_attempt
    if job is None or current is None or job.standby is not None or job.status.is_terminal:
        return None
    warned = lifecycle is None
    # The warned attempt's interruption counts for the lifecycle the policy or the fallback picks (and for the
    # budget's check of it); a given lifecycle is bought whatever the count.
    interruptions = job.interruptions + 1
    if next_attempt_refusal(job, interruptions=interruptions, now=now) is not None:
        return None  # the job could not use it: its budget or training time would not pay for it
    decisions: list[Decision] = []
    try:
        if current.group:
            # A group's replacement joins the healthy nodes: same pool, same placement group.
            standby = _group_replacement(job, current, compute, subnet_ids, launch_template_name, group, now)
        else:
            standby = launch_instance(
                job,
                compute=compute,
                subnet_ids=subnet_ids,
                launch_template_name=launch_template_name,
                interruptions=interruptions,
                now=now,
                also_avoid={Pool(current.instance_type, current.availability_zone)} if warned else (),
                decisions=decisions,
                assumed=assumed,
                lifecycle=lifecycle,
            )
    except (CapacityUnavailable, *REFUSED):
        # The workflow's own acquire after the attempt reports a refusal with its code and advice.
        return None
    store.link_instance(standby.instance_id, job_id)
    stored = update_job(
        store,
        job_id,
        lambda latest: (
            latest
            if latest.standby
            else record_decisions(latest, decisions, now).model_copy(update={"standby": standby})
        ),
    )
    if stored.standby is None or stored.standby.instance_id != standby.instance_id:
        # Kept on the job before terminating: a NotFound just after the launch does not prove it gone, so the
        # job's release must still find it.
        # EC2 bills it too.
        update_job(store, job_id, lambda latest: keep_unused(latest, standby, now))
        compute.terminate([standby.instance_id])
        return None
    return standby


def _group_replacement(
    job: Job,
    current: Attempt,
    compute: Compute,
    subnet_ids: tuple[str, ...],
    launch_template_name: str,
    group: GroupSite,
    now: datetime,
) -> Attempt:
    pool = Pool(current.instance_type, current.availability_zone)
    [instance_id] = launch_in_pool(
        job,
        pool,
        1,
        compute=compute,
        subnet_ids=subnet_ids,
        launch_template_name=launch_template_name,
        site=group,
        lifecycle=current.lifecycle,
        efa=current.efa,
    )
    return current.model_copy(
        update={
            "number": len(job.attempts) + 1,
            "instance_id": instance_id,
            "started_at": now,
            "ended_at": None,
            "end_reason": None,
            "notice_at": None,
            "rebalance_at": None,
            "nodes": [],
            "leader_result": None,
        }
    )

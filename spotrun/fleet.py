"""Capacity for a job's attempts: acquire an instance, watch it boot, release everything."""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel

from spotrun.capacity import (
    LaunchedInstance,
    avoid_list,
    build_fleet_request,
    candidate_types,
    choose_lifecycle,
    parse_fleet_response,
)
from spotrun.errors import CapacityExhausted, CapacityUnavailable, InstanceBootTimeout, InstanceLost
from spotrun.job import Attempt, Job, JobStatus, Lifecycle, transition
from spotrun.manifest import JobManifest
from spotrun.ports import Compute
from spotrun.pricing import instance_info
from spotrun.store import JobStore, update_job
from spotrun.timing import WorkflowTiming

INTERRUPTED_REASONS = frozenset({"interrupted", "reclaimed", "instance-lost"})
_LOST_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})


class ReadyReport(BaseModel):
    """Whether the job's instance can take commands."""

    ready: bool
    instance_id: str
    state: str | None


def manifest_of(job: Job) -> JobManifest:
    """The job's validated manifest."""
    return JobManifest.model_validate(job.manifest)


def _open_attempt(job: Job) -> Attempt | None:
    attempt = job.current_attempt
    return attempt if attempt is not None and attempt.ended_at is None else None


def acquire_instance(
    *,
    job_id: str,
    store: JobStore,
    compute: Compute,
    subnet_ids: tuple[str, ...],
    launch_template_name: str,
    timing: WorkflowTiming,
    now: datetime,
) -> Attempt:
    """Launch the instance for the job's next attempt and record it.

    Parameters
    ----------
    job_id
        The job.
    store, compute
        Ports to the job store and EC2.
    subnet_ids, launch_template_name
        Where and how instances are launched.
    timing
        The workflow's timing (how long to keep waiting for capacity).
    now
        The current time.

    Returns
    -------
    Attempt
        The new attempt. A retried call whose attempt is still open returns that attempt and launches nothing.

    Raises
    ------
    CapacityUnavailable
        When no pool could supply an instance; the workflow waits and calls again.
    """
    job = store.get(job_id)
    if job is None:
        raise InstanceLost(f"no job {job_id}")
    existing = _open_attempt(job)
    if existing is not None:
        return existing
    job = update_job(store, job_id, lambda current: transition(current, JobStatus.ACQUIRING, now))
    manifest = manifest_of(job)
    interruptions = sum(1 for attempt in job.attempts if attempt.end_reason in INTERRUPTED_REASONS)
    subnets = compute.subnet_zones(subnet_ids)
    reclaimed = [
        ((attempt.instance_type, attempt.availability_zone), attempt.ended_at)
        for attempt in job.attempts
        if attempt.end_reason in INTERRUPTED_REASONS and attempt.ended_at is not None
    ]
    avoid = avoid_list(reclaimed, now, manifest.capacity.avoid_pool_minutes)
    lifecycle = choose_lifecycle(manifest.capacity, interruptions, spot_unavailable=False)
    tags = {**manifest.tags, "spotrun:job-id": job_id, "spotrun:attempt": str(len(job.attempts) + 1)}

    def launch(chosen: Lifecycle) -> list[LaunchedInstance]:
        request = build_fleet_request(
            candidates=candidate_types(manifest.resources),
            subnets=subnets,
            launch_template_name=launch_template_name,
            lifecycle=chosen,
            max_price_per_hour=manifest.capacity.max_price_per_hour,
            avoid_pools=avoid,
            nodes=manifest.resources.nodes,
            tags=tags,
        )
        return parse_fleet_response(compute.create_fleet(request), subnets)

    try:
        launched = launch(lifecycle)
    except CapacityUnavailable:
        fallback = choose_lifecycle(manifest.capacity, interruptions, spot_unavailable=True)
        if fallback == lifecycle:
            _note_capacity_wait(store, job, timing, now)
            raise
        launched = launch(fallback)
    first = launched[0]
    price = (
        compute.spot_price(first.instance_type, first.availability_zone)
        if first.lifecycle == "spot"
        else None
    )
    attempt = Attempt(
        number=len(job.attempts) + 1,
        instance_id=first.instance_id,
        instance_type=first.instance_type,
        availability_zone=first.availability_zone,
        lifecycle=first.lifecycle,
        price_per_hour=price
        if price is not None
        else instance_info(first.instance_type).on_demand_usd_per_hour,
        started_at=now,
    )
    for instance in launched:
        store.link_instance(instance.instance_id, job_id)

    def record(current: Job) -> Job:
        where = f"{attempt.instance_type} in {attempt.availability_zone}"
        booting = transition(current, JobStatus.BOOTING, now, detail=where)
        return booting.model_copy(
            update={"attempts": [*current.attempts, attempt], "waiting_for_capacity_since": None}
        )

    update_job(store, job_id, record)
    return attempt


def _note_capacity_wait(store: JobStore, job: Job, timing: WorkflowTiming, now: datetime) -> None:
    since = job.waiting_for_capacity_since or now
    if now - since > timedelta(seconds=timing.capacity_patience_seconds):
        raise CapacityExhausted(f"no capacity for job {job.job_id} since {since.isoformat()}; giving up")
    if job.waiting_for_capacity_since is None:
        update_job(
            store, job.job_id, lambda current: current.model_copy(update={"waiting_for_capacity_since": now})
        )


def check_ready(
    *, job_id: str, store: JobStore, compute: Compute, timing: WorkflowTiming, now: datetime
) -> ReadyReport:
    """Report whether the job's current instance is running.

    Raises
    ------
    InstanceLost
        When the instance is gone (reclaimed, or terminated by someone) before it became ready.
    InstanceBootTimeout
        When it has been booting for longer than the timing allows; it is terminated first.
    """
    job = store.get(job_id)
    attempt = None if job is None else _open_attempt(job)
    if attempt is None:
        raise InstanceLost(f"job {job_id} has no open attempt")
    state = compute.instance_state(attempt.instance_id)
    if state == "running":
        return ReadyReport(ready=True, instance_id=attempt.instance_id, state=state)
    if state is None or state in _LOST_STATES:
        raise InstanceLost(
            f"instance {attempt.instance_id} is {state or 'unknown to EC2'} before it was ready"
        )
    if now - attempt.started_at > timedelta(seconds=timing.boot_timeout_seconds):
        compute.terminate([attempt.instance_id])
        raise InstanceBootTimeout(
            f"instance {attempt.instance_id} still {state} after {timing.boot_timeout_seconds:.0f} s"
        )
    return ReadyReport(ready=False, instance_id=attempt.instance_id, state=state)


def release_instances(
    *, job_id: str, reason: str, store: JobStore, compute: Compute, now: datetime
) -> list[str]:
    """Terminate every instance the job ever had and close its open attempt.

    Terminating an instance twice is harmless, so this runs on every path out of the workflow, any number of
    times.

    Returns
    -------
    list[str]
        The instance ids EC2 accepted for termination.
    """
    job = store.get(job_id)
    if job is None:
        return []
    terminated = compute.terminate(job.instance_ids())

    def close(current: Job) -> Job:
        attempt = _open_attempt(current)
        if attempt is None:
            return current
        closed = attempt.model_copy(update={"ended_at": now, "end_reason": reason})
        return current.model_copy(update={"attempts": [*current.attempts[:-1], closed]})

    update_job(store, job_id, close)
    return terminated

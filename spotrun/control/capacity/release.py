"""Releasing a job's capacity: terminate every instance it ever had, and close its open attempt."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from spotrun.control.capacity.readiness import not_visible_yet
from spotrun.control.ports import Compute, JobStore
from spotrun.control.store import update_job
from spotrun.model.errors import InstancesNotReleased
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.group import end_open_nodes, release_kept
from spotrun.model.job.record import Job
from spotrun.model.job.standby import retire_standby


def release_instances(
    *, job_id: str, reason: str, store: JobStore, compute: Compute, now: datetime
) -> list[str]:
    """Terminate every instance the job ever had and close its open attempt.

    Terminating an instance twice is harmless, so this runs on every path out of the workflow, any number of
    times. An instance EC2 answers NotFound for within :data:`EC2_CONSISTENCY_GRACE` of its launch may still
    run: it is kept in the job's ``unreleased`` list (and stays among its instances), for the next call to
    terminate; :func:`release_for_workflow` refuses to report such a release done. EC2 bills such an instance
    until it is really gone, so each call that finds it unconfirmed, and the call that gets EC2's confirmation,
    moves its end to ``now``: the job's cost and budget count it up to the confirmation, never only up to
    the first NotFound.

    Returns
    -------
    list[str]
        The instance ids EC2 accepted for termination.
    """
    job = store.get(job_id)
    if job is None:
        return []
    terminated = compute.terminate(job.instance_ids())
    pending = unconfirmed_terminations(job, terminated, now)
    # A NotFound from TerminateInstances shortly after a launch does not prove the instance gone (EC2 is
    # eventually consistent, https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html): those
    # instances ran at least until now, whether this call confirms their termination or not.
    unconfirmed = {*job.unreleased, *pending}

    def close(current: Job) -> Job:
        current = retire_standby(current, now)  # terminated above, never used: still billed
        current = current.model_copy(update={"unreleased": pending})
        attempt = current.open_attempt
        if attempt is not None:
            closed = attempt.model_copy(update={"ended_at": now, "end_reason": reason})
            current = current.with_current_attempt(end_open_nodes(closed, reason, now))
        else:
            # A group waiting for a replacement: its kept nodes ran until now.
            current = release_kept(current, reason, now)
        return billed_until(current, unconfirmed, now)

    update_job(store, job_id, close)
    return terminated


def billed_until(job: Job, instance_ids: Collection[str], now: datetime) -> Job:
    """The job whose last record of each instance in ``instance_ids`` ends no earlier than ``now``.

    Parameters
    ----------
    job
        The record, its open attempt already closed.
    instance_ids
        Instances whose termination EC2 had not confirmed before ``now``.
    now
        The latest time they may have run until.

    Returns
    -------
    Job
        The record with those instances' ends moved to ``now`` (an instance that hosted several records is
        billed once: only its last record moves).
    """
    if not instance_ids:
        return job
    attempts, unused = list(job.attempts), list(job.unused_instances)
    last: dict[str, tuple[list[Attempt], int]] = {}
    for records in (attempts, unused):
        for index, record in enumerate(records):
            if record.instance_id in instance_ids:
                kept = last.get(record.instance_id)
                if kept is None or kept[0][kept[1]].started_at <= record.started_at:
                    last[record.instance_id] = (records, index)
    for records, index in last.values():
        record = records[index]
        if record.ended_at is not None and record.ended_at < now:
            records[index] = record.model_copy(update={"ended_at": now})
    return job.model_copy(update={"attempts": attempts, "unused_instances": unused})


def unconfirmed_terminations(job: Job, accepted: Collection[str], now: datetime) -> list[str]:
    """The job's instances whose termination EC2 did not accept though they may exist (launched lately).

    Parameters
    ----------
    job
        The job (its attempts, standby and unused instances, with their launch times).
    accepted
        The ids TerminateInstances accepted.
    now
        The current time.

    Returns
    -------
    list[str]
        Ids answered NotFound within :data:`EC2_CONSISTENCY_GRACE` of their launch, in the job's order.
    """
    launched: dict[str, datetime] = {}
    for attempt in job.billed_instances():
        launched.setdefault(attempt.instance_id, attempt.started_at)
    return [
        instance_id
        for instance_id in job.instance_ids()
        if instance_id not in accepted and not_visible_yet(launched[instance_id], now)
    ]


def release_for_workflow(
    *, job_id: str, reason: str, store: JobStore, compute: Compute, now: datetime
) -> list[str]:
    """:func:`release_instances`, done only when EC2 has accepted the termination of every instance that may run.

    Raises
    ------
    InstancesNotReleased
        When some instance was answered NotFound shortly after its launch; the workflow retries with backoff.
    """
    terminated = release_instances(job_id=job_id, reason=reason, store=store, compute=compute, now=now)
    job = store.get(job_id)
    if job is not None and job.unreleased:
        raise InstancesNotReleased(
            f"EC2 does not know {', '.join(job.unreleased)} yet (launched moments ago): their termination is "
            "not confirmed; retrying"
        )
    return terminated

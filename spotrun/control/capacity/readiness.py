"""Whether a job's instance can take its first command: EC2 says running, SSM says online.

Also home of the EC2 eventual-consistency window: an instance EC2 does not know just after its launch is not
visible yet, not lost.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from spotrun.control.ports import Commands, Compute, JobStore
from spotrun.control.store import update_job
from spotrun.model.base import DeferredModel
from spotrun.model.capacity.ec2_states import GONE_STATES
from spotrun.model.errors import InstanceBootTimeout, InstanceLost, InstanceNotManaged
from spotrun.model.job.attempt import Attempt, NodeRun
from spotrun.model.job.group import ordered_by_address
from spotrun.model.job.record import Job
from spotrun.model.timing import WorkflowTiming

# The EC2 API is eventually consistent: just after a launch, DescribeInstances and TerminateInstances may
# answer InvalidInstanceID.NotFound for an instance that exists, and a NotFound from TerminateInstances does not
# mean the instance is (or will be) terminated: it may still run. AWS advises retrying with backoff "up to a
# few minutes". https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html
# Within this window after its launch an instance EC2 does not know is taken as not visible yet; after it,
# as gone (a terminated instance stays visible for about an hour, so one unknown later ended long ago).
EC2_CONSISTENCY_GRACE = timedelta(minutes=5)


class ReadyReport(DeferredModel):
    """Whether the job's instance can take commands."""

    ready: bool
    instance_id: str
    state: str | None
    agent_online: bool = False  # SSM lists the instance as a managed node with PingStatus Online


def not_visible_yet(launched_at: datetime, now: datetime) -> bool:
    """Whether an instance EC2 answers NotFound for may simply not have propagated yet (it launched lately)."""
    return now - launched_at <= EC2_CONSISTENCY_GRACE


def check_ready(
    *,
    job_id: str,
    store: JobStore,
    compute: Compute,
    commands: Commands,
    timing: WorkflowTiming,
    now: datetime,
) -> ReadyReport:
    """Report whether the job's current instance can take its first command.

    Ready means EC2 says ``running`` and SSM lists the instance as a managed node that is online: until its SSM
    agent has registered, SendCommand answers ``InvalidInstanceId`` (one cause the SSM API gives for that
    error is "SSM Agent isn't registered with the SSM endpoint"),
    https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_SendCommand.html. An instance EC2 does
    not know yet, shortly after its launch, is not visible yet (:data:`EC2_CONSISTENCY_GRACE`), not lost.

    Raises
    ------
    InstanceLost
        When the instance is gone (reclaimed, or terminated by someone) before it became ready.
    InstanceBootTimeout
        When it has been booting for longer than the timing allows; it is terminated first.
    InstanceNotManaged
        When it has run for longer than ``timing.ssm_registration_timeout_seconds`` without its SSM agent
        coming online; it is terminated first. The message says what usually causes it.
    """
    job = store.get(job_id)
    attempt = None if job is None else job.open_attempt
    if attempt is None:
        raise InstanceLost(f"job {job_id} has no open attempt")
    # A group is ready when every node is; the first node that is not answers for it.
    for node in attempt.node_runs():
        report = _check_node(job_id, attempt, node, store, compute, commands, timing, now)
        if not report.ready:
            return report
    if attempt.group:
        _number_by_address(job_id, attempt, store, compute)
    return ReadyReport(ready=True, instance_id=attempt.instance_id, state="running", agent_online=True)


def _check_node(
    job_id: str,
    attempt: Attempt,
    node: NodeRun,
    store: JobStore,
    compute: Compute,
    commands: Commands,
    timing: WorkflowTiming,
    now: datetime,
) -> ReadyReport:
    instance_id = node.instance_id
    state = compute.instance_state(instance_id)
    if state == "running":
        return _check_managed(job_id, attempt, node, store, commands, compute, timing, now)
    if state is None and not_visible_yet(node.started_at, now):
        return ReadyReport(ready=False, instance_id=instance_id, state=None)
    if state is None or state in GONE_STATES:
        raise InstanceLost(f"instance {instance_id} is {state or 'unknown to EC2'} before it was ready")
    if now - attempt.started_at > timedelta(seconds=timing.boot_timeout_seconds):
        compute.terminate([instance_id])
        raise InstanceBootTimeout(
            f"instance {instance_id} still {state} after {timing.boot_timeout_seconds:.0f} s"
        )
    return ReadyReport(ready=False, instance_id=instance_id, state=state)


def _number_by_address(job_id: str, attempt: Attempt, store: JobStore, compute: Compute) -> None:
    # Every node runs: number them by address, as torch's rendezvous ranks them (spotrun.model.job.group).
    if all(node.private_ip for node in attempt.nodes):
        return
    addresses = compute.private_ips(attempt.instance_ids())
    missing = [instance_id for instance_id in attempt.instance_ids() if instance_id not in addresses]
    if missing:
        raise InstanceLost(f"EC2 gives no private address for {', '.join(missing)}")
    ordered = ordered_by_address(attempt.nodes, addresses)

    def number(current: Job) -> Job:
        latest = current.open_attempt
        if latest is None or latest.number != attempt.number:
            return current
        by_id = {node.instance_id: node for node in latest.nodes}
        # Each node as stored now (its running_at), with its address and place.
        nodes = [
            by_id[node.instance_id].model_copy(update={"node": node.node, "private_ip": node.private_ip})
            for node in ordered
        ]
        return current.with_current_attempt(
            latest.model_copy(update={"nodes": nodes, "instance_id": nodes[0].instance_id})
        )

    update_job(store, job_id, number)


def await_ready(
    *,
    job_id: str,
    store: JobStore,
    compute: Compute,
    commands: Commands,
    timing: WorkflowTiming,
    clock: Callable[[], datetime],
    sleep: Callable[[float], None],
) -> ReadyReport:
    """Check readiness every ``timing.ready_recheck_seconds`` until ready, or ``timing.ready_hold_seconds`` passed.

    The workflow polls between checks at ``timing.boot_poll_seconds``; looking again at a finer grain inside
    the check answers within a recheck of the instance becoming reachable for most of its boot. Each look is
    :func:`check_ready` (its errors end the hold at once).

    Parameters
    ----------
    clock, sleep
        The current time, and a pause of so many seconds (the handler's are the wall clock and ``time.sleep``).

    Returns
    -------
    ReadyReport
        The last look's report: ready, or not yet once the hold is over.
    """
    deadline = clock() + timedelta(seconds=timing.ready_hold_seconds)
    while True:
        report = check_ready(
            job_id=job_id, store=store, compute=compute, commands=commands, timing=timing, now=clock()
        )
        if report.ready or clock() + timedelta(seconds=timing.ready_recheck_seconds) > deadline:
            return report
        sleep(timing.ready_recheck_seconds)


def _check_managed(
    job_id: str,
    attempt: Attempt,
    node: NodeRun,
    store: JobStore,
    commands: Commands,
    compute: Compute,
    timing: WorkflowTiming,
    now: datetime,
) -> ReadyReport:
    instance_id = node.instance_id
    if commands.agent_online(instance_id):
        return ReadyReport(ready=True, instance_id=instance_id, state="running", agent_online=True)
    running_at = node.running_at
    if running_at is None:
        running_at = now

        def note(current: Job) -> Job:
            latest = current.open_attempt
            mine = None if latest is None or latest.number != attempt.number else latest.node_on(instance_id)
            if latest is None or mine is None or mine.running_at is not None:
                return current
            return current.with_current_attempt(latest.with_node(mine.model_copy(update={"running_at": now})))

        update_job(store, job_id, note)
    waited = (now - running_at).total_seconds()
    if waited > timing.ssm_registration_timeout_seconds:
        compute.terminate([instance_id])
        raise InstanceNotManaged(
            f"instance {instance_id} has been running for {waited:.0f} s but its SSM agent never came online "
            "(DescribeInstanceInformation does not list it as Online), so no command can reach it. Check that "
            "the launch template's instance profile has the AmazonSSMManagedInstanceCore policy, that the "
            "subnet reaches the ssm, ssmmessages and ec2messages endpoints (NAT or VPC endpoints), and that "
            "the AMI runs the SSM agent"
        )
    return ReadyReport(ready=False, instance_id=instance_id, state="running", agent_online=False)

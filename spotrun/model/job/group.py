"""Multi-node attempts: a group's nodes, their order, which ones a lost node leaves behind, and their bill.

A multi-node attempt runs every node in one zone, one placement group and one instance type. When one node is
lost, the attempt ends; the healthy nodes are kept (:data:`~spotrun.model.job.attempt.END_KEPT`), not
terminated, and the next attempt adopts them beside a replacement. torch's c10d rendezvous ranks the nodes by
their ``--local-addr`` sorted as text (``sorted(state.participants)`` in
``torch/distributed/elastic/rendezvous/dynamic_rendezvous.py``, a participant being ``(addr, pid, local_id)``),
so :func:`ordered_by_address` numbers them the same way: node k hosts group rank k, node 0 the c10d store.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime

from spotrun.model.job.attempt import END_KEPT, Attempt, NodeRun
from spotrun.model.job.record import Job

# torchrun's rendezvous port on node 0 is chosen per attempt in this range, so that two attempts on a kept node
# never race for the port of the one before (and two jobs sharing a host in the emulator rarely meet).
RENDEZVOUS_PORTS = range(29400, 30400)


def rendezvous_port(job_id: str, attempt: int) -> int:
    """The port of the attempt's c10d store on node 0 (stable for a job and attempt)."""
    digest = hashlib.sha256(f"{job_id}/{attempt}".encode()).digest()
    return RENDEZVOUS_PORTS[int.from_bytes(digest[:4], "big") % len(RENDEZVOUS_PORTS)]


def rendezvous_id(job_id: str, attempt: int) -> str:
    """torchrun's ``--rdzv-id`` of the attempt's group."""
    return f"{job_id}-{attempt}"


def ordered_by_address(nodes: list[NodeRun], addresses: Mapping[str, str]) -> list[NodeRun]:
    """The nodes with their private addresses, renumbered in the order torch's rendezvous ranks them.

    Parameters
    ----------
    nodes
        The attempt's nodes.
    addresses
        Instance id -> private IPv4 address; every node's must be there.

    Raises
    ------
    KeyError
        When a node's address is missing.
    """
    addressed = [node.model_copy(update={"private_ip": addresses[node.instance_id]}) for node in nodes]
    ordered = sorted(addressed, key=lambda node: str(node.private_ip))
    return [node.model_copy(update={"node": index}) for index, node in enumerate(ordered)]


def kept_nodes(job: Job) -> list[NodeRun]:
    """The nodes the job's last (closed) attempt kept for the next one; none while an attempt is open."""
    last = job.current_attempt
    if last is None or last.ended_at is None:
        return []
    return [node for node in last.nodes if node.end_reason == END_KEPT]


def close_group(attempt: Attempt, lost: set[str], reason: str, now: datetime) -> Attempt:
    """The attempt's nodes ended at ``now``: those in ``lost`` with ``reason``, the others kept.

    A node that ended already keeps its end.
    """
    nodes = [
        node
        if node.ended_at is not None
        else node.model_copy(
            update={"ended_at": now, "end_reason": reason if node.instance_id in lost else END_KEPT}
        )
        for node in attempt.nodes
    ]
    return attempt.model_copy(update={"nodes": nodes})


def end_open_nodes(attempt: Attempt, reason: str, now: datetime) -> Attempt:
    """The attempt with every node that has not ended ended at ``now`` for ``reason``."""
    nodes = [
        node if node.ended_at is not None else node.model_copy(update={"ended_at": now, "end_reason": reason})
        for node in attempt.nodes
    ]
    return attempt.model_copy(update={"nodes": nodes})


def release_kept(job: Job, reason: str, now: datetime) -> Job:
    """Bill the kept nodes no attempt adopted up to ``now``: they ran on after their attempt closed.

    Each kept node becomes an unused instance from its attempt's end to ``now`` (EC2 bills it until its
    termination), and its node stops counting as kept. Idempotent.
    """
    last = job.current_attempt
    kept = kept_nodes(job)
    if last is None or not kept:
        return job
    unused = [
        last.model_copy(
            update={
                "instance_id": node.instance_id,
                "started_at": node.ended_at,
                "ended_at": now,
                "end_reason": reason,
                "nodes": [],
                "leader_result": None,
            }
        )
        for node in kept
    ]
    released = last.model_copy(
        update={
            "nodes": [
                node.model_copy(update={"end_reason": f"{END_KEPT}, then {reason}"})
                if node.end_reason == END_KEPT
                else node
                for node in last.nodes
            ]
        }
    )
    return job.with_current_attempt(released).model_copy(
        update={"unused_instances": [*job.unused_instances, *unused]}
    )


def all_done(attempt: Attempt) -> bool:
    """Whether every node of a group attempt has reported the step in progress a success."""
    return all(node.done for node in attempt.nodes)


def step_started(attempt: Attempt) -> Attempt:
    """The attempt as a new agent step starts: no node has reported it, no result is kept."""
    if not attempt.nodes:
        return attempt
    return attempt.model_copy(
        update={
            "nodes": [node.model_copy(update={"done": False}) for node in attempt.nodes],
            "leader_result": None,
        }
    )


def group_note(attempt: Attempt) -> str:
    """``"2 x g5.xlarge in us-east-1a (1 kept, 1 new)"`` for a group; the single instance's type and zone else."""
    where = f"{attempt.instance_type} in {attempt.availability_zone}"
    if not attempt.nodes:
        return where
    kept = sum(1 for node in attempt.nodes if node.kept_from is not None)
    fresh = len(attempt.nodes) - kept
    detail = f" ({kept} kept, {fresh} new)" if kept else ""
    return f"{len(attempt.nodes)} x {where}{detail}"

"""A group that lost a node: adopt the nodes it kept, add a replacement in their zone, or move the whole group.

The healthy nodes of a multi-node attempt are kept when a node is lost (``record_interruption``): they keep
running, and the next acquisition builds the attempt from them, the replacement launched on the warning (the
standby) if there is one, and as many new nodes as are missing, launched in the same pool and placement group.
If that pool has none for ``capacity.replace_node_minutes``, the kept nodes are released and the whole group is
launched elsewhere (:func:`spotrun.control.capacity.acquire.acquire_instance` does it, avoiding the zone).
"""

from __future__ import annotations

from datetime import datetime

from spotrun.control.capacity.fleet import GroupSite, launch_fleet
from spotrun.control.capacity.launch import pool_price
from spotrun.control.capacity.readiness import not_visible_yet
from spotrun.control.ports import Compute, JobStore
from spotrun.control.store import update_job
from spotrun.model.capacity.candidates import Lifecycle, Pool, candidate_types
from spotrun.model.capacity.fleet_request import FleetLaunchError
from spotrun.model.errors import CapacityUnavailable
from spotrun.model.job.attempt import Attempt, NodeRun
from spotrun.model.job.group import kept_nodes, release_kept
from spotrun.model.job.record import Job
from spotrun.model.layout import ATTEMPT_TAG, JOB_ID_TAG
from spotrun.model.timing import WorkflowTiming

# Why kept nodes were let go: their zone had no replacement in time, so the group moves.
END_GROUP_MOVED = "group-moved"


def alive(compute: Compute, instance_id: str, launched_at: datetime, now: datetime) -> bool:
    """Whether an instance is pending or running (or, just after its launch, not visible to EC2 yet)."""
    state = compute.instance_state(instance_id)
    return state in ("pending", "running") or (state is None and not_visible_yet(launched_at, now))


def launch_in_pool(
    job: Job,
    pool: Pool,
    count: int,
    *,
    compute: Compute,
    subnet_ids: tuple[str, ...],
    launch_template_name: str,
    site: GroupSite,
    lifecycle: Lifecycle,
    efa: bool,
    failures: list[FleetLaunchError] | None = None,
) -> list[str]:
    """Launch ``count`` nodes for a group in ``pool``, in its zone's placement group; return their ids.

    ``efa`` says whether the group's nodes have an EFA: a replacement gets the same template as its peers.

    Raises
    ------
    CapacityUnavailable
        When the pool cannot supply them all (or the zone is none of the deployment's subnets').
    """
    manifest = job.require_manifest()
    zones = compute.subnet_zones(subnet_ids)
    subnets = {subnet: zone for subnet, zone in zones.items() if zone == pool.availability_zone}
    types = [info for info in candidate_types(manifest.resources) if info.name == pool.instance_type]
    if not subnets or not types:
        raise CapacityUnavailable(f"no subnet or candidate type left for the pool {pool}")
    nodes = manifest.resources.nodes
    launched = launch_fleet(
        compute,
        candidates=types,
        subnets=subnets,
        launch_template_name=site.efa_launch_template_name if efa else launch_template_name,
        placement_groups=site.placements(subnets, nodes),
        lifecycle=lifecycle,
        max_price_per_hour=manifest.capacity.max_price_per_hour,
        avoid_pools=(),
        nodes=count,
        tags={**manifest.tags, JOB_ID_TAG: job.job_id, ATTEMPT_TAG: str(len(job.attempts) + 1)},
        failures=failures,
    )
    return [instance.instance_id for instance in launched]


def rebuild_group(
    job: Job,
    *,
    store: JobStore,
    compute: Compute,
    subnet_ids: tuple[str, ...],
    launch_template_name: str,
    site: GroupSite,
    timing: WorkflowTiming,
    now: datetime,
    failures: list[FleetLaunchError],
) -> tuple[Attempt | None, set[Pool]]:
    """The next attempt of a group that kept nodes: those still alive, the standby, and new nodes for the rest.

    Returns
    -------
    tuple[Attempt | None, set[Pool]]
        The attempt (not recorded; new instances linked to the job), and no pool to avoid. None when the job
        kept no node (the caller launches a whole group); None and every pool of the zone when the zone found
        no replacement for ``timing.replace_node_seconds``: the kept nodes are then terminated and billed up to
        now, and the caller launches the whole group elsewhere.

    Raises
    ------
    CapacityUnavailable
        While the zone has no replacement and the bound has not passed (the workflow waits and calls again).
    """
    previous = job.current_attempt
    kept = kept_nodes(job)
    if previous is None or previous.ended_at is None or not kept:
        return None, set()
    pool = Pool(previous.instance_type, previous.availability_zone)
    living = [node for node in kept if alive(compute, node.instance_id, node.started_at, now)]
    standby = job.standby
    if standby is not None and not alive(compute, standby.instance_id, standby.started_at, now):
        standby = None
    missing = job.require_manifest().resources.nodes - len(living) - (1 if standby else 0)
    fresh: list[str] = []
    if missing > 0:
        try:
            fresh = launch_in_pool(
                job,
                pool,
                missing,
                compute=compute,
                subnet_ids=subnet_ids,
                launch_template_name=launch_template_name,
                site=site,
                lifecycle=previous.lifecycle,
                efa=previous.efa,
                failures=failures,
            )
        except CapacityUnavailable:
            waited = (now - previous.ended_at).total_seconds()
            if waited < timing.replace_node_seconds:
                raise
            move_group(job.job_id, store=store, compute=compute, now=now)
            zone = previous.availability_zone
            return None, {Pool(info.name, zone) for info in candidate_types(job.require_manifest().resources)}
    for instance_id in fresh:
        store.link_instance(instance_id, job.job_id)
    nodes = [
        *(
            NodeRun(
                node=0, instance_id=node.instance_id, started_at=previous.ended_at, kept_from=previous.number
            )
            for node in living
        ),
        *(
            [NodeRun(node=0, instance_id=standby.instance_id, started_at=standby.started_at)]
            if standby
            else []
        ),
        *(NodeRun(node=0, instance_id=instance_id, started_at=now) for instance_id in fresh),
    ]
    nodes = [node.model_copy(update={"node": index}) for index, node in enumerate(nodes)]
    price, source = pool_price(compute, previous.lifecycle, pool)
    attempt = Attempt(
        number=len(job.attempts) + 1,
        instance_id=nodes[0].instance_id,
        instance_type=pool.instance_type,
        availability_zone=pool.availability_zone,
        lifecycle=previous.lifecycle,
        price_per_hour=price,
        price_source=source,
        started_at=now,
        nodes=nodes,
        efa=previous.efa,
    )
    return attempt, set()


def move_group(job_id: str, *, store: JobStore, compute: Compute, now: datetime) -> None:
    """Let the kept nodes go: terminate them, bill them up to ``now``, and note the move on the timeline."""
    job = store.get(job_id)
    if job is None:
        return
    kept = [node.instance_id for node in kept_nodes(job)]
    compute.terminate(kept)
    update_job(store, job_id, lambda current: release_kept(current, END_GROUP_MOVED, now))

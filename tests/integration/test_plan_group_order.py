"""A multi-node plan's pools are where the whole group lands (the emulator's EC2): with pools that cannot hold
every node skipped or exhausted, acquisition launches all the nodes in the plan's next pool, in its zone's
placement group, with the EFA the plan said."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fixtures_handlers as handlers  # noqa: E402
from plan_world import NOW, plan_in  # noqa: E402

from spotrun.aws.adapters import Ec2Compute  # noqa: E402
from spotrun.control.capacity.acquire import launch_instance  # noqa: E402
from spotrun.control.capacity.fleet import GroupSite  # noqa: E402
from spotrun.local.capacity.catalog import Pool  # noqa: E402
from spotrun.local.runtime import LocalRuntime  # noqa: E402
from spotrun.model.job.record import ManifestSource, new_job  # noqa: E402
from spotrun.model.manifest.parse import parse_manifest_document  # noqa: E402

NODES = 2
# Spot prices out of the request's order, so that the plan's sorting matters; the cheapest pool holds one node
# only, so a group of two can never land there though the plan lists it first (nobody outside EC2 sees capacity).
PRICES = {
    ("g5.xlarge", "us-east-1b"): 0.30,
    ("g4dn.xlarge", "us-east-1c"): 0.31,
    ("g4dn.xlarge", "us-east-1a"): 0.35,
    ("g5.xlarge", "us-east-1a"): 0.38,
    ("g4dn.xlarge", "us-east-1b"): 0.41,
}
SMALL = ("g5.xlarge", "us-east-1b")
POOLS = [
    Pool(
        instance_type,
        zone,
        spot_price=price,
        capacity=1 if (instance_type, zone) == SMALL else NODES,
        boot_delay_seconds=10.0,
    )
    for (instance_type, zone), price in PRICES.items()
]
MANIFEST = parse_manifest_document(
    {
        "name": "group-ordered",
        "resources": {"instance_types": ["g4dn.xlarge", "g5.xlarge"], "nodes": NODES},
        "training": {"command": ["torchrun", "--nproc-per-node", "1", "train.py"]},
    }
)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    workdir = tmp_path_factory.mktemp("plan-group-order")
    with handlers.pass_runtime(workdir, POOLS, 0.01) as started:
        yield started


def test_the_group_lands_whole_in_the_plans_first_pool_that_can_hold_it(runtime):
    # Given the plan of a two-node job: the emulator's priced pools by price, then the unpriced ones it lacks
    plan = plan_in(runtime, MANIFEST)
    order = [(pool.instance_type, pool.availability_zone) for pool in plan.pools][: len(PRICES)]
    assert order == sorted(PRICES, key=PRICES.__getitem__)
    assert all(pool.spot_price_per_hour is None for pool in plan.pools[len(PRICES) :])
    assert plan.group is not None
    assert plan.group.nodes == NODES
    assert plan.pools[0].group_spot_price_per_hour == pytest.approx(NODES * PRICES[SMALL])
    compute = Ec2Compute(runtime.settings.region)
    ec2 = runtime.client("ec2")
    site = GroupSite.of(runtime.settings)
    landed = []
    # When each launch finds the plan's pools before the k-th unable to hold the group (the first holds one
    # node, the others are exhausted)
    for index in range(1, len(order)):
        for instance_type, zone in order[1:index]:
            runtime.capacity.exhaust(instance_type, zone)
        job = new_job(
            f"group-ordered-{index:06x}",
            "group-ordered",
            ManifestSource(kind="api", key=f"k{index}"),
            MANIFEST,
            NOW,
        )
        attempt = launch_instance(
            job,
            compute=compute,
            subnet_ids=runtime.settings.subnet_ids,
            launch_template_name=runtime.settings.launch_template_name,
            interruptions=0,
            now=NOW,
            group=site,
        )
        described = [
            instance
            for reservation in ec2.describe_instances(InstanceIds=attempt.instance_ids())["Reservations"]
            for instance in reservation["Instances"]
        ]
        # Then every node is in one pool and one placement group, and the attempt's EFA is the plan's
        assert len(described) == NODES
        assert len({(i["InstanceType"], i["Placement"]["AvailabilityZone"]) for i in described}) == 1
        assert len({i["Placement"].get("GroupName") for i in described}) == 1
        assert described[0]["Placement"].get("GroupName")
        assert attempt.efa is plan.group.efa
        landed.append((attempt.instance_type, attempt.availability_zone))
        ec2.terminate_instances(InstanceIds=attempt.instance_ids())
        for instance_type, zone in order:
            runtime.capacity.refill(instance_type, zone)
    # And that pool is the plan's next one each time, the pool too small for the group never chosen
    assert landed == order[1:]

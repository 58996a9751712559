"""The plan's pool order is the order acquisition really tries (the emulator's EC2): with the plan's first k
pools exhausted, launch_instance lands in its (k+1)-th, spot first, then the on-demand fallback."""

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
from spotrun.control.capacity.launch import launch_instance  # noqa: E402
from spotrun.local.capacity.catalog import Pool  # noqa: E402
from spotrun.local.runtime import LocalRuntime  # noqa: E402
from spotrun.model.job.record import ManifestSource, new_job  # noqa: E402
from spotrun.model.manifest.parse import parse_manifest_document  # noqa: E402

# Spot prices out of the request's order (g4dn before g5, zones by subnet id), so that sorting matters.
PRICES = {
    ("g5.xlarge", "us-east-1b"): 0.30,
    ("g4dn.xlarge", "us-east-1c"): 0.31,
    ("g4dn.xlarge", "us-east-1a"): 0.35,
    ("g5.xlarge", "us-east-1a"): 0.38,
    ("g4dn.xlarge", "us-east-1b"): 0.41,
    ("g5.xlarge", "us-east-1c"): 0.44,
    ("g4dn.xlarge", "us-east-1d"): 0.47,
    ("g5.xlarge", "us-east-1d"): 0.33,
}
POOLS = [
    Pool(instance_type, zone, spot_price=price, capacity=1, boot_delay_seconds=10.0)
    for (instance_type, zone), price in PRICES.items()
]
MANIFEST = parse_manifest_document(
    {
        "name": "ordered",
        "resources": {"instance_types": ["g4dn.xlarge", "g5.xlarge"]},
        "capacity": {"on_demand_fallback": True},
        "training": {"command": ["python", "train.py"]},
    }
)


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    workdir = tmp_path_factory.mktemp("plan-order")
    with handlers.pass_runtime(workdir, POOLS, 0.01) as started:
        yield started


def test_with_the_first_pools_exhausted_acquisition_tries_the_pools_in_the_plans_order(runtime):
    # Given the plan of a two-type job in the emulator's four zones with the on-demand fallback
    plan = plan_in(runtime, MANIFEST)
    order = [(pool.instance_type, pool.availability_zone, pool.lifecycle) for pool in plan.pools]
    spot = sorted(PRICES, key=PRICES.__getitem__)
    assert order[:8] == [(*pool, "spot") for pool in spot]
    assert [pool.lifecycle for pool in plan.pools[8:]] == ["on-demand"] * 8
    assert plan.first_pool == plan.pools[0]
    assert plan.ok
    # When each launch finds the plan's earlier pools exhausted
    landed = []
    compute = Ec2Compute(runtime.settings.region)
    for index in range(len(order)):
        for instance_type, zone, lifecycle in order[:index]:
            runtime.capacity.exhaust(instance_type, zone, lifecycle)
        source = ManifestSource(kind="api", key=f"k{index}")
        job = new_job(f"ordered-{index:012x}", "ordered", source, MANIFEST, NOW)
        attempt = launch_instance(
            job,
            compute=compute,
            subnet_ids=runtime.settings.subnet_ids,
            launch_template_name=runtime.settings.launch_template_name,
            interruptions=0,
            now=NOW,
        )
        landed.append((attempt.instance_type, attempt.availability_zone, attempt.lifecycle))
        runtime.client("ec2").terminate_instances(InstanceIds=[attempt.instance_id])
        for instance_type, zone, _lifecycle in order:
            runtime.capacity.refill(instance_type, zone)
    # Then each lands in the next pool of the plan, spot in price order, then on-demand in the fallback's order
    assert landed == order

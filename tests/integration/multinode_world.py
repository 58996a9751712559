"""What the emulator's multi-node tests share: a runtime with three pools, a group fleet's request, EC2's and
IMDS's answers.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import fixtures_handlers as handlers  # noqa: E402

from spotrun.local.capacity.catalog import Pool  # noqa: E402
from spotrun.local.runtime import LocalRuntime  # noqa: E402

TIME_SCALE = 0.01
BOOT_SECONDS = 40.0  # 0.4 s real

# g5 in 1a is the cheapest but holds one node; g5 in 1b holds two; g6 in 1a holds three and costs most.
POOLS = [
    Pool("g5.xlarge", "us-east-1a", spot_price=0.30, capacity=1, boot_delay_seconds=BOOT_SECONDS),
    Pool("g5.xlarge", "us-east-1b", spot_price=0.35, capacity=2, boot_delay_seconds=BOOT_SECONDS),
    Pool("g6.xlarge", "us-east-1a", spot_price=0.40, capacity=3, boot_delay_seconds=BOOT_SECONDS),
]


@pytest.fixture(scope="module", name="module_runtime")
def started_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    """One runtime per test module, on :data:`POOLS`, its workflow a pass state."""
    workdir = tmp_path_factory.mktemp("multinode")
    with handlers.pass_runtime(workdir, POOLS, TIME_SCALE) as started:
        yield started


@pytest.fixture(name="runtime")
def fresh_runtime(module_runtime: LocalRuntime) -> Iterator[LocalRuntime]:
    """The module's runtime, with every instance a test launched terminated and every pool refilled after."""
    yield module_runtime
    live = [sim for sim in module_runtime.instances if not sim.terminating]
    for sim in live:
        module_runtime.chaos.resume_training(sim.instance_id)
    if live:
        module_runtime.client("ec2").terminate_instances(InstanceIds=[sim.instance_id for sim in live])
    for sim in live:
        sim.gone.wait(10)
    for pool in POOLS:
        module_runtime.capacity.refill(pool.instance_type, pool.availability_zone)


def subnets(runtime: LocalRuntime) -> dict[str, str]:
    """The deployment's subnet of each zone."""
    subnets = runtime.client("ec2").describe_subnets(SubnetIds=list(runtime.settings.subnet_ids))["Subnets"]
    return {s["AvailabilityZone"]: s["SubnetId"] for s in subnets}


def overrides(runtime: LocalRuntime, **extra: Any) -> list[dict[str, Any]]:
    """One CreateFleet override per pool of :data:`POOLS`, each with ``extra``."""
    by_zone = subnets(runtime)
    return [
        {"InstanceType": itype, "SubnetId": by_zone[zone], **extra}
        for itype, zone in (
            ("g5.xlarge", "us-east-1a"),
            ("g5.xlarge", "us-east-1b"),
            ("g6.xlarge", "us-east-1a"),
        )
    ]


def group_fleet(
    runtime: LocalRuntime, nodes: int, overrides: list[dict[str, Any]], **spot_options: Any
) -> dict[str, Any]:
    """An instant spot fleet for ``nodes`` nodes, all in one pool or none (what a multi-node job asks)."""
    options = {
        "AllocationStrategy": "price-capacity-optimized",
        "SingleAvailabilityZone": True,
        "SingleInstanceType": True,
        "MinTargetCapacity": nodes,
        **spot_options,
    }
    return runtime.client("ec2").create_fleet(
        Type="instant",
        TargetCapacitySpecification={"TotalTargetCapacity": nodes, "DefaultTargetCapacityType": "spot"},
        SpotOptions={k: v for k, v in options.items() if v is not None},
        LaunchTemplateConfigs=[
            {
                "LaunchTemplateSpecification": {
                    "LaunchTemplateName": runtime.settings.launch_template_name,
                    "Version": "$Latest",
                },
                "Overrides": overrides,
            }
        ],
    )


def ids(reply: dict[str, Any]) -> list[str]:
    """The instances a CreateFleet reply launched."""
    return [iid for launched in reply["Instances"] for iid in launched["InstanceIds"]]


def describe(runtime: LocalRuntime, instance_ids: list[str]) -> dict[str, dict[str, Any]]:
    """EC2's DescribeInstances of ``instance_ids``, by id."""
    reservations = runtime.client("ec2").describe_instances(InstanceIds=instance_ids)["Reservations"]
    return {i["InstanceId"]: i for r in reservations for i in r["Instances"]}


def imds(runtime: LocalRuntime, instance_id: str, path: str) -> tuple[int, str]:
    """The status and body of an IMDSv2 GET of ``path`` on the instance's metadata service."""
    endpoint = runtime.instance(instance_id).imds.endpoint
    put = urllib.request.Request(  # noqa: S310 - a local URL
        f"{endpoint}/latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}
    )
    with urllib.request.urlopen(put, timeout=5) as answer:  # noqa: S310
        token = answer.read().decode()
    get = urllib.request.Request(f"{endpoint}{path}", headers={"X-aws-ec2-metadata-token": token})  # noqa: S310
    try:
        with urllib.request.urlopen(get, timeout=5) as answer:  # noqa: S310
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""

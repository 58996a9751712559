"""Unit tests of the GPU instance catalog (spotrun.model.capacity.instance_types, read through
spotrun.model.capacity.pricing)."""

from __future__ import annotations

import dataclasses
import gzip
import json
from importlib.resources import files
from typing import get_args

import pytest

from spotrun.model.capacity.pricing import GPU_CATALOG, InstanceTypeInfo, instance_info
from spotrun.model.manifest.schema import GpuName

REQUIRED_TYPES = [
    *(
        f"g4dn.{size}"
        for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "metal")
    ),
    *(
        f"{family}.{size}"
        for family in ("g5", "g6", "g6e")
        for size in (
            "xlarge",
            "2xlarge",
            "4xlarge",
            "8xlarge",
            "12xlarge",
            "16xlarge",
            "24xlarge",
            "48xlarge",
        )
    ),
    "p3.2xlarge",
    "p3.8xlarge",
    "p3.16xlarge",
    "p3dn.24xlarge",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
]


@pytest.mark.parametrize("name", REQUIRED_TYPES)
def test_catalog_has_every_common_gpu_type(name: str) -> None:
    # Given the list of types spotrun promises to place jobs on
    # When the type is looked up
    info = instance_info(name)
    # Then it is there under its own name
    assert info.name == name


def test_catalog_holds_nothing_but_the_promised_types() -> None:
    # Given the catalog
    # When its keys are compared with the promised list
    # Then they are the same, so an accidental extra or duplicate row shows up
    assert sorted(GPU_CATALOG) == sorted(REQUIRED_TYPES)


@pytest.mark.parametrize(
    ("name", "price"),
    [
        ("g4dn.xlarge", 0.526),
        ("g5.xlarge", 1.006),
        ("g6.xlarge", 0.8048),
        ("g6e.xlarge", 1.861),
        ("p3.2xlarge", 3.06),
        ("p4d.24xlarge", 21.957642),
        ("p4de.24xlarge", 27.44705),
        ("p5.48xlarge", 55.04),
    ],
)
def test_on_demand_prices_are_the_published_us_east_1_prices(name: str, price: float) -> None:
    # Given a type whose us-east-1 Linux list price is well known
    # When its catalog entry is read
    info = instance_info(name)
    # Then the price matches to the cent fraction AWS publishes
    assert info.on_demand_usd_per_hour == price


@pytest.mark.parametrize(
    ("name", "gpu_name", "gpus", "gpu_memory_gib"),
    [
        ("g4dn.xlarge", "t4", 1, 16),
        ("g4dn.12xlarge", "t4", 4, 16),
        ("g4dn.metal", "t4", 8, 16),
        ("g5.16xlarge", "a10g", 1, 24),
        ("g5.48xlarge", "a10g", 8, 24),
        ("g6.24xlarge", "l4", 4, 24),
        ("g6e.48xlarge", "l40s", 8, 48),
        ("p3.8xlarge", "v100", 4, 16),
        ("p3dn.24xlarge", "v100", 8, 32),
        ("p4d.24xlarge", "a100", 8, 40),
        ("p4de.24xlarge", "a100", 8, 80),
        ("p5.48xlarge", "h100", 8, 80),
        ("p5e.48xlarge", "h200", 8, 141),
    ],
)
def test_gpu_shape_of_each_family(name: str, gpu_name: str, gpus: int, gpu_memory_gib: int) -> None:
    # Given a type whose GPU configuration is documented by AWS
    # When its catalog entry is read
    info = instance_info(name)
    # Then GPU model, count and per-GPU memory are right
    assert (info.gpu_name, info.gpus, info.gpu_memory_gib) == (gpu_name, gpus, gpu_memory_gib)


def test_every_entry_is_plausible() -> None:
    # Given the manifest's accepted GPU names
    known_gpus = set(get_args(GpuName))
    for info in GPU_CATALOG.values():
        # When each entry is checked
        # Then its GPU is one the manifest accepts and its numbers are positive
        assert info.gpu_name in known_gpus, info
        assert info.gpus in (1, 4, 8), info
        assert info.vcpus > 0, info
        assert info.memory_gib > 0, info
        assert info.on_demand_usd_per_hour > 0, info


def test_every_manifest_gpu_name_has_a_type() -> None:
    # Given the GPU names a manifest may ask for
    # When the catalog's GPUs are collected
    offered = {info.gpu_name for info in GPU_CATALOG.values()}
    # Then each name can be satisfied by some type
    assert offered == set(get_args(GpuName))


def test_bigger_sizes_of_a_family_cost_more() -> None:
    # Given single-GPU g5 sizes in increasing vCPU order
    sizes = ["g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g5.8xlarge", "g5.16xlarge"]
    # When their prices are listed
    prices = [instance_info(name).on_demand_usd_per_hour for name in sizes]
    # Then they increase (a swapped row in the table would break this)
    assert prices == sorted(prices)
    assert len(set(prices)) == len(prices)


def test_instance_info_names_an_unknown_type() -> None:
    # Given a type that is not a GPU type spotrun knows
    # When it is looked up
    with pytest.raises(KeyError) as caught:
        instance_info("m5.large")
    # Then the error message names it
    assert "m5.large" in caught.value.args[0]


def test_catalog_and_entries_are_read_only() -> None:
    # Given the shared catalog
    info = instance_info("g5.xlarge")
    # When someone tries to change it
    # Then neither the mapping nor an entry can be modified
    with pytest.raises(TypeError):
        GPU_CATALOG["x.large"] = info  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.on_demand_usd_per_hour = 0.0  # type: ignore[misc]


def test_family_is_the_part_before_the_dot() -> None:
    # Given types of several families
    # When their family is read
    # Then it is the prefix, including multi-letter ones
    assert instance_info("g4dn.metal").family == "g4dn"
    assert instance_info("p3dn.24xlarge").family == "p3dn"
    assert isinstance(instance_info("g5.xlarge"), InstanceTypeInfo)


@pytest.mark.parametrize(
    ("name", "efa"),
    [
        ("g4dn.4xlarge", False),
        ("g4dn.8xlarge", True),
        ("g5.xlarge", False),
        ("g5.48xlarge", True),
        ("g6e.4xlarge", False),
        ("g6e.8xlarge", True),
        ("p3.16xlarge", False),
        ("p3dn.24xlarge", True),
        ("p4d.24xlarge", True),
        ("p5.48xlarge", True),
    ],
)
def test_efa_support_is_aws_listed_one(name: str, efa: bool) -> None:
    # Given a type on either side of AWS's list of EFA-capable types
    # When its catalog entry is read
    info = instance_info(name)
    # Then it says whether it can carry an EFA
    assert info.efa is efa


def test_efa_support_matches_describe_instance_types() -> None:
    # Given EC2's own DescribeInstanceTypes answer, as moto ships it (NetworkInfo.EfaSupported)
    described = json.loads(
        gzip.decompress((files("moto.ec2") / "resources" / "instance_types.json.gz").read_bytes())
    )
    # When every catalog type that EC2 describes is compared
    compared = {name: info for name, info in GPU_CATALOG.items() if name in described}
    # Then the catalog agrees with EC2 on each (p3.* are absent from the answer: older than its data)
    assert len(compared) >= len(GPU_CATALOG) - 3
    for name, info in compared.items():
        assert info.efa is bool(described[name]["NetworkInfo"].get("EfaSupported")), name

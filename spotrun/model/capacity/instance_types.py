"""The GPU instance types spotrun knows: their GPUs, size, a us-east-1 on-demand list price and EFA support.

Pure data. The list price only orders candidate instance types (cheapest first); what a job cost is measured per
region in :mod:`spotrun.model.capacity.pricing`. Update the table, not the code, when AWS adds a type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from spotrun.model.manifest.schema import GpuName


@dataclass(frozen=True, slots=True)
class InstanceTypeInfo:
    """What spotrun knows about one GPU instance type.

    Attributes
    ----------
    name
        The EC2 instance type, e.g. ``g5.xlarge``.
    gpu_name
        The GPU model in lower case, as in the manifest's ``resources.gpu_names``.
    gpus
        GPUs on one instance.
    gpu_memory_gib
        Memory of each GPU in GiB, as AWS lists it for the type (e.g. 24 for an A10G).
    vcpus
        vCPUs on one instance.
    memory_gib
        Host memory of one instance, GiB.
    on_demand_usd_per_hour
        us-east-1 Linux on-demand list price, USD per instance-hour: ranks candidates, never prices a job
        (see :func:`on_demand_price`).
    efa
        Whether the type can carry an Elastic Fabric Adapter (:data:`EFA_TYPES`).
    """

    name: str
    gpu_name: GpuName
    gpus: int
    gpu_memory_gib: int
    vcpus: int
    memory_gib: int
    on_demand_usd_per_hour: float
    efa: bool = False

    @property
    def family(self) -> str:
        """The part of the name before the dot, e.g. ``g5`` for ``g5.xlarge``."""
        return self.name.split(".", 1)[0]


# (name, gpu, gpus, GiB per GPU, vCPUs, memory GiB, on-demand USD/h), us-east-1, Linux.
_TABLE: tuple[tuple[str, GpuName, int, int, int, int, float], ...] = (
    # g4dn: NVIDIA T4, 16 GiB
    ("g4dn.xlarge", "t4", 1, 16, 4, 16, 0.526),
    ("g4dn.2xlarge", "t4", 1, 16, 8, 32, 0.752),
    ("g4dn.4xlarge", "t4", 1, 16, 16, 64, 1.204),
    ("g4dn.8xlarge", "t4", 1, 16, 32, 128, 2.176),
    ("g4dn.12xlarge", "t4", 4, 16, 48, 192, 3.912),
    ("g4dn.16xlarge", "t4", 1, 16, 64, 256, 4.352),
    ("g4dn.metal", "t4", 8, 16, 96, 384, 7.824),
    # g5: NVIDIA A10G, 24 GiB
    ("g5.xlarge", "a10g", 1, 24, 4, 16, 1.006),
    ("g5.2xlarge", "a10g", 1, 24, 8, 32, 1.212),
    ("g5.4xlarge", "a10g", 1, 24, 16, 64, 1.624),
    ("g5.8xlarge", "a10g", 1, 24, 32, 128, 2.448),
    ("g5.12xlarge", "a10g", 4, 24, 48, 192, 5.672),
    ("g5.16xlarge", "a10g", 1, 24, 64, 256, 4.096),
    ("g5.24xlarge", "a10g", 4, 24, 96, 384, 8.144),
    ("g5.48xlarge", "a10g", 8, 24, 192, 768, 16.288),
    # g6: NVIDIA L4, 24 GiB
    ("g6.xlarge", "l4", 1, 24, 4, 16, 0.8048),
    ("g6.2xlarge", "l4", 1, 24, 8, 32, 0.9776),
    ("g6.4xlarge", "l4", 1, 24, 16, 64, 1.3232),
    ("g6.8xlarge", "l4", 1, 24, 32, 128, 2.0144),
    ("g6.12xlarge", "l4", 4, 24, 48, 192, 4.6016),
    ("g6.16xlarge", "l4", 1, 24, 64, 256, 3.3968),
    ("g6.24xlarge", "l4", 4, 24, 96, 384, 6.6752),
    ("g6.48xlarge", "l4", 8, 24, 192, 768, 13.3504),
    # g6e: NVIDIA L40S, 48 GiB
    ("g6e.xlarge", "l40s", 1, 48, 4, 32, 1.861),
    ("g6e.2xlarge", "l40s", 1, 48, 8, 64, 2.24208),
    ("g6e.4xlarge", "l40s", 1, 48, 16, 128, 3.00424),
    ("g6e.8xlarge", "l40s", 1, 48, 32, 256, 4.52856),
    ("g6e.12xlarge", "l40s", 4, 48, 48, 384, 10.49264),
    ("g6e.16xlarge", "l40s", 1, 48, 64, 512, 7.57719),
    ("g6e.24xlarge", "l40s", 4, 48, 96, 768, 15.06559),
    ("g6e.48xlarge", "l40s", 8, 48, 192, 1536, 30.13118),
    # p3 / p3dn: NVIDIA V100, 16 GiB (32 GiB on p3dn)
    ("p3.2xlarge", "v100", 1, 16, 8, 61, 3.06),
    ("p3.8xlarge", "v100", 4, 16, 32, 244, 12.24),
    ("p3.16xlarge", "v100", 8, 16, 64, 488, 24.48),
    ("p3dn.24xlarge", "v100", 8, 32, 96, 768, 31.212),
    # p4d / p4de: NVIDIA A100, 40 GiB (80 GiB on p4de)
    ("p4d.24xlarge", "a100", 8, 40, 96, 1152, 21.957642),
    ("p4de.24xlarge", "a100", 8, 80, 96, 1152, 27.44705),
    # p5: NVIDIA H100, 80 GiB
    ("p5.48xlarge", "h100", 8, 80, 192, 2048, 55.04),
    # p5e: NVIDIA H200, 141 GiB. Sold mostly through Capacity Blocks: no published on-demand figure, so this
    # approximate one only ranks it last; spotrun.model.capacity.on_demand_prices has none, and no cost is
    # compared with it.
    ("p5e.48xlarge", "h200", 8, 141, 192, 2048, 108.53),
)

# The types of the table that support an Elastic Fabric Adapter, from AWS's list ("Supported instance types",
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types): the 8xlarge sizes and up of
# g4dn, g5, g6 and g6e, p3dn (not p3), p4d, p4de, p5 and p5e. DescribeInstanceTypes says the same
# (NetworkInfo.EfaSupported; tests/unit/test_instance_types.py compares the two through moto's copy of it).
EFA_TYPES: frozenset[str] = frozenset(
    {
        *(
            f"{family}.{size}"
            for family in ("g5", "g6", "g6e")
            for size in ("8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge")
        ),
        *(f"g4dn.{size}" for size in ("8xlarge", "12xlarge", "16xlarge", "metal")),
        "p3dn.24xlarge",
        "p4d.24xlarge",
        "p4de.24xlarge",
        "p5.48xlarge",
        "p5e.48xlarge",
    }
)

GPU_CATALOG: Mapping[str, InstanceTypeInfo] = MappingProxyType(
    {row[0]: InstanceTypeInfo(*row, efa=row[0] in EFA_TYPES) for row in _TABLE}
)
"""Every GPU instance type spotrun can place a job on, by name (read-only)."""


def instance_info(name: str) -> InstanceTypeInfo:
    """Look up an instance type in :data:`GPU_CATALOG`.

    Parameters
    ----------
    name
        An EC2 instance type such as ``g5.xlarge``.

    Returns
    -------
    InstanceTypeInfo
        Its GPUs, size and on-demand price.

    Raises
    ------
    KeyError
        When spotrun's catalog does not know the type; the message names it.
    """
    try:
        return GPU_CATALOG[name]
    except KeyError:
        raise KeyError(f"{name!r} is not a GPU instance type in spotrun's catalog") from None

"""What a deployer may choose, read from CDK context (``cdk.json`` or ``-c key=value``).

Every option has a safe default, so ``cdk synth`` works with no context at all and without an AWS account.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from constructs import Node

# Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04): NVIDIA driver, CUDA, SSM agent, Python 3.12 and
# the AWS CLI are on it, and it already assembles instance-store NVMe at /opt/dlami/nvme. Resolved by
# CloudFormation at deploy time (an SSM-typed parameter), so synth needs no AWS call and every deploy picks up
# the latest patched image.
DLAMI_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"


@dataclass(frozen=True)
class StackOptions:
    """The deployment's choices.

    Attributes
    ----------
    stack_name
        CloudFormation stack name; also the prefix of the dashboard's name.
    vpc_id
        An existing VPC to run instances in (looked up: needs ``CDK_DEFAULT_ACCOUNT``/``REGION``, which the CDK
        CLI sets). Without it a new VPC is created.
    max_azs
        Zones of a new VPC. An environment-agnostic synth can only address 2; give ``availability_zones`` to
        spread spot requests over more pools.
    availability_zones
        Explicit zones of a new VPC (e.g. ``us-east-1a,us-east-1b,us-east-1c``).
    nat_gateways
        NAT gateways of a new VPC; 1 is the economical default (instances need egress to AWS APIs and PyPI).
    powertools_layer_version
        Version of the public Powertools for AWS Lambda (Python) V3 layer.
    ami_ssm_parameter
        Public SSM parameter holding the instances' AMI id.
    root_device_name, root_volume_gib
        The instances' root EBS volume (encrypted gp3).
    alarm_email
        Subscribed to the alarm topic when given (the subscription must be confirmed from the mail).
    gpu_low_utilization_percent, gpu_memory_high_percent
        Alarm thresholds on the GPU metrics the agent publishes.
    job_data_retention_days
        Days after which objects under ``jobs/`` in the jobs bucket expire (finished models live in the archive).
    superseded_checkpoint_days
        Days a pruned (non-current) checkpoint version is kept before it is deleted for good.
    data_buckets
        Extra buckets (names) the instances may read training inputs and code from.
    archive_buckets
        Extra buckets (names) a manifest's ``archive.destination`` may name. The archive function may write to
        them and the API may read and restore from them, exactly as in the deployment's own archive bucket;
        submission refuses a destination in any other bucket, naming the allowed ones.
    access_logs_bucket
        An existing bucket that receives S3 server access logs of both spotrun buckets.
    """

    stack_name: str = "Spotrun"
    vpc_id: str | None = None
    max_azs: int = 3
    availability_zones: tuple[str, ...] = ()
    nat_gateways: int = 1
    powertools_layer_version: int = 27
    ami_ssm_parameter: str = DLAMI_PARAMETER
    root_device_name: str = "/dev/sda1"
    root_volume_gib: int = 200
    alarm_email: str | None = None
    gpu_low_utilization_percent: float = 20.0
    gpu_memory_high_percent: float = 90.0
    job_data_retention_days: int = 180
    superseded_checkpoint_days: int = 7
    data_buckets: tuple[str, ...] = ()
    archive_buckets: tuple[str, ...] = ()
    access_logs_bucket: str | None = None

    @classmethod
    def from_context(cls, node: Node) -> StackOptions:
        """Read every option from the construct tree's context, keeping defaults for absent keys.

        Parameters
        ----------
        node
            Any node of the app (context is inherited from the app).

        Returns
        -------
        StackOptions
            The options, with context strings converted to each field's type.
        """
        values: dict[str, Any] = {}
        defaults = cls()
        for item in fields(cls):
            raw = node.try_get_context(item.name)
            if raw is None or raw == "":
                continue
            default = getattr(defaults, item.name)
            values[item.name] = _convert(raw, default)
        return cls(**values)


def _convert(raw: Any, default: Any) -> Any:
    """Context given with ``-c`` is always a string; cdk.json may hold real JSON types."""
    if isinstance(default, tuple):
        items = raw if isinstance(raw, list) else str(raw).split(",")
        return tuple(str(item).strip() for item in items if str(item).strip())
    if isinstance(default, bool):
        return str(raw).lower() in {"1", "true", "yes"}
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    return str(raw)

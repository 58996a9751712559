"""What a deployer may choose, read from CDK context (``cdk.json`` or ``-c key=value``).

Every option has a safe default, so ``cdk synth`` works with no context at all and without an AWS account.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from constructs import Node

from spotrun.model.manifest.secrets import check_pattern
from spotrun.notifications import Subscription

# Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04): NVIDIA driver, CUDA, SSM agent, Python 3.12 and
# the AWS CLI are on it, and it already assembles instance-store NVMe at /opt/dlami/nvme. Resolved by
# CloudFormation at deploy time (an SSM-typed parameter), so synth needs no AWS call and every deploy picks up
# the latest patched image.
DLAMI_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
# Deep Learning OSS Nvidia Driver AMI GPU PyTorch 2.11 (Ubuntu 24.04): the same base with PyTorch and CUDA in a
# virtualenv at /opt/pytorch (its release notes' python_location: /opt/pytorch/bin/python). AWS names these
# parameters after the AMI's name without "Deep Learning AMI", and the framework version is part of the name
# (https://docs.aws.amazon.com/dlami/latest/devguide/find-dlami-id.html): a newer PyTorch is a new parameter.
PYTORCH_DLAMI_PARAMETER = (
    "/aws/service/deeplearning/ami/x86_64/oss-nvidia-driver-gpu-pytorch-2.11-ubuntu-24.04/latest/ami-id"
)
# Names ami_ssm_parameter also accepts, for the images spotrun is tried on (docs/guides/environment.md).
AMI_PRESETS = {"dlami-base": DLAMI_PARAMETER, "dlami-pytorch": PYTORCH_DLAMI_PARAMETER}
# An SSM parameter's full name (https://docs.aws.amazon.com/systems-manager/latest/userguide/
# sysman-parameter-name-constraints.html: letters, digits and .-_/, rooted at /); an AMI id, old or long form.
_PARAMETER_NAME = re.compile(r"^/[A-Za-z0-9_.\-/]{1,1010}$")
_AMI_ID = re.compile(r"^ami-(?:[0-9a-f]{8}|[0-9a-f]{17})$")


class OptionError(ValueError):
    """A context option that cannot be used; the message names it and what it accepts."""


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
        SSM parameter holding the instances' AMI id (resolved at deploy time, so each deploy takes the latest
        image it names), or a preset: ``dlami-base`` (the default, Python 3.12 without torch) or
        ``dlami-pytorch`` (PyTorch with CUDA in ``/opt/pytorch``). See ``docs/guides/environment.md``.
    ami_id
        An explicit image instead (a custom AMI, say one with the job's dependencies baked in), in the
        deployment's region; refused together with ``ami_ssm_parameter``. It must run the SSM Agent, cloud-init
        and a Python 3.11+ with ``venv``, as the Deep Learning AMIs do.
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
    secret_references
        ARN patterns (IAM wildcards) of the Secrets Manager secrets and SSM parameters a manifest's
        ``training.secrets`` may name, e.g. ``arn:aws:secretsmanager:us-east-1:123456789012:secret:training/*``.
        The job-access role may read exactly these (each job's session only its own references); submission
        refuses any other reference. Empty (the default): no job may have secrets. See ``docs/guides/secrets.md``.
    notifications
        Subscribers to the jobs' events (``docs/guides/notifications.md``): a JSON list of
        ``{"email": ADDRESS}`` or ``{"webhook_secret": SECRET NAME OR ARN, "header"?: NAME}``, each with optional
        ``"events"`` (``ended``, ``interrupted``, ``budget``, ``deadline``; all by default) and ``"jobs"`` (a
        job-name prefix). A webhook's URL is read from the secret's ``url`` key at deploy time; a URL given as
        such is refused, since the template would hold it.
    """

    stack_name: str = "Spotrun"
    vpc_id: str | None = None
    max_azs: int = 3
    availability_zones: tuple[str, ...] = ()
    nat_gateways: int = 1
    powertools_layer_version: int = 27
    ami_ssm_parameter: str = DLAMI_PARAMETER
    ami_id: str | None = None
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
    secret_references: tuple[str, ...] = ()
    notifications: tuple[Subscription, ...] = ()

    def __post_init__(self) -> None:
        # The edge where a deployer's choice comes in: checked once, so the constructs take it as it is.
        for pattern in self.secret_references:
            try:
                check_pattern(pattern)
            except ValueError as exc:
                raise OptionError(f"secret_references: {exc}") from None
        if self.ami_ssm_parameter in AMI_PRESETS:
            object.__setattr__(self, "ami_ssm_parameter", AMI_PRESETS[self.ami_ssm_parameter])
        if not _PARAMETER_NAME.fullmatch(self.ami_ssm_parameter):
            raise OptionError(
                f"ami_ssm_parameter: {self.ami_ssm_parameter!r} is neither a preset ({', '.join(AMI_PRESETS)}) "
                "nor an SSM parameter name such as /aws/service/deeplearning/ami/x86_64/.../latest/ami-id"
            )
        if self.ami_id is None:
            return
        if not _AMI_ID.fullmatch(self.ami_id):
            raise OptionError(f"ami_id: {self.ami_id!r} is not an AMI id such as ami-0123456789abcdef0")
        if self.ami_ssm_parameter != DLAMI_PARAMETER:
            raise OptionError(_BOTH_IMAGES)

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
            if item.name == "notifications":
                values[item.name] = read_notifications(raw)
                continue
            default = getattr(defaults, item.name)
            values[item.name] = _convert(raw, default)
        if "ami_id" in values and "ami_ssm_parameter" in values:
            raise OptionError(_BOTH_IMAGES)
        return cls(**values)


_BOTH_IMAGES = "ami_id and ami_ssm_parameter both name the instances' image: give one of them"


def read_notifications(raw: Any) -> tuple[Subscription, ...]:
    """The ``notifications`` option: a JSON list (cdk.json) or its text (``-c notifications='[...]'``).

    Raises
    ------
    OptionError
        When it is not a list of subscriptions, or a subscription names a webhook's URL or token as such.
    """
    import json

    from pydantic import ValidationError

    try:
        items = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        raise OptionError("notifications: not a JSON list of subscriptions") from None
    if not isinstance(items, list):
        raise OptionError("notifications: not a JSON list of subscriptions")
    subscribers = []
    for index, item in enumerate(items, start=1):
        if isinstance(item, dict) and ("webhook" in item or "token" in item):
            raise OptionError(
                f"notifications[{index}]: a webhook's URL and token go in a Secrets Manager secret "
                '({"url": ..., "token": ...}) named by webhook_secret; given here, the template would hold them'
            )
        try:
            subscribers.append(Subscription.model_validate(item))
        except ValidationError as exc:
            reasons = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'subscription'}: {e['msg']}" for e in exc.errors()
            )
            raise OptionError(f"notifications[{index}]: {reasons}") from None
    return tuple(subscribers)


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

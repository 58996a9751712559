"""What a CreateFleet error means: wait for capacity, raise a quota, or fix the configuration.

Pure. An instant fleet reports why a pool gave no instance in the response's ``Errors`` (one
``CreateFleetError`` per pool and lifecycle, its ``ErrorCode`` one of EC2's API error codes), and a request
that EC2 refuses as a whole raises a ``ClientError`` with such a code instead. Both end here, as a list of
:class:`~spotrun.model.capacity.fleet_request.FleetLaunchError`, and are sorted into three kinds:

- **capacity**: the pool has no spare capacity (or the spot price is above the maximum) right now; it may
  come back, so the workflow waits and asks again.
- **quota**: the account's limit is reached (a Service Quotas vCPU quota of 0 is the common case on a new
  account); waiting does not raise it, so the job fails at once naming the quota to raise.
- **configuration**: the request can never succeed as it is (no such launch template, a type not offered
  in the zone, a denied permission); the job fails at once with the code and what to change.

Sources: EC2 API error codes, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
(client errors such as ``InvalidLaunchTemplateName.NotFoundException``, ``UnauthorizedOperation``,
``Unsupported``, ``VcpuLimitExceeded``, ``MaxSpotInstanceCountExceeded``; the capacity errors
``InsufficientInstanceCapacity``, ``InsufficientCapacity``); CreateFleetError,
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateFleetError.html; the EC2 Fleet guide on
request types, https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-fleet-request-type.html (an instant fleet
returns the errors of the pools it could not launch in); Spot quotas, which are vCPU quotas per instance
family in Service Quotas, https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from spotrun.model.capacity.candidates import Pool
from spotrun.model.capacity.pricing import GPU_CATALOG

ErrorKind = Literal["capacity", "quota", "configuration"]

# No spare capacity in the pool, or a spot price above the request's maximum: both pass with time. EC2's
# own transient server errors (after boto3's retries) are waited on the same way.
CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientFreeAddressesInSubnet",
        "SpotMaxPriceTooLow",
        "UnfulfillableCapacity",
        "InternalError",
        "ServiceUnavailable",
        "Unavailable",
        "RequestLimitExceeded",
        "Server.InternalError",
        "Server.InsufficientInstanceCapacity",
    }
)

# Account limits: only a quota increase (or fewer instances elsewhere) helps.
QUOTA_CODES = frozenset(
    {
        "MaxSpotInstanceCountExceeded",
        "VcpuLimitExceeded",
        "InstanceLimitExceeded",
        "MaxSpotFleetRequestCountExceeded",
        "MaxFleetCountExceeded",
    }
)

# What to do about configuration errors, by code (or code prefix, for the InvalidLaunchTemplate* family).
_CONFIGURATION_ADVICE: tuple[tuple[str, str], ...] = (
    (
        "InvalidLaunchTemplate",
        "the launch template named by the deployment (SPOTRUN_LAUNCH_TEMPLATE_NAME) does not exist in this "
        "region or is malformed: deploy the spotrun stack, which creates it, or point the setting at an "
        "existing template",
    ),
    (
        "UnauthorizedOperation",
        "the acquire function's IAM role may not launch the fleet: it needs ec2:CreateFleet, "
        "ec2:RunInstances, ec2:CreateTags and iam:PassRole on the instance profile; check the role and any "
        "service control policy (decode the message with `aws sts decode-authorization-message`)",
    ),
    (
        "AuthFailure",
        "EC2 did not accept the caller's credentials: check the acquire function's role",
    ),
    (
        "Unsupported",
        "an instance type is not offered in a chosen zone, or not with this purchase option: check "
        "`aws ec2 describe-instance-type-offerings --location-type availability-zone`, then change "
        "resources.instance_types or the deployment's subnets",
    ),
    (
        "InvalidParameter",
        "EC2 refused a parameter of the request (see its message): check capacity.max_price_per_hour, the "
        "instance types and the launch template's settings",
    ),
    (
        "MissingParameter",
        "the request lacks a parameter EC2 needs (see its message): check the launch template",
    ),
    (
        "InvalidAMIID",
        "the launch template's AMI does not exist in this region: update the template's image",
    ),
    (
        "InvalidSubnetID",
        "a deployment subnet does not exist: check SPOTRUN_SUBNET_IDS",
    ),
    (
        "InvalidGroup",
        "the launch template's security group does not exist: check the template",
    ),
    (
        "OptInRequired",
        "the account or region is not opted in to this service: enable the region or the subscription",
    ),
    (
        "PendingVerification",
        "the account is still being verified by AWS: wait for verification or contact AWS Support",
    ),
    (
        "Blocked",
        "the account is blocked from launching instances: contact AWS Support",
    ),
)

_SPOT_QUOTAS = {
    "g": "All G and VT Spot Instance Requests",
    "p5": "All P5 Spot Instance Requests",
    "p": "All P4, P3 and P2 Spot Instance Requests",
}
_ON_DEMAND_QUOTAS = {
    "g": "Running On-Demand G and VT instances",
    "p": "Running On-Demand P instances",
}


def classify(code: str) -> ErrorKind:
    """The kind of one EC2 error code.

    A code spotrun does not know is taken as a configuration error: failing at once with the code named is
    better than waiting an hour on something that may never pass.
    """
    if code in CAPACITY_CODES:
        return "capacity"
    if code in QUOTA_CODES:
        return "quota"
    return "configuration"


def overall_kind(codes: Sequence[str]) -> ErrorKind:
    """The kind of a launch that failed in every pool, from the codes of its pools.

    Any pool short of capacity makes the whole a capacity error: it may come back, and waiting for it is
    right. Otherwise a quota error wins over configuration errors, since raising the quota is what the user
    must do first. No codes at all (nothing launched, nothing said) is treated as capacity.
    """
    kinds = {classify(code) for code in codes}
    if not kinds or "capacity" in kinds:
        return "capacity"
    return "quota" if "quota" in kinds else "configuration"


def quota_name(instance_type: str, lifecycle: str | None) -> str:
    """The Service Quotas quota (service Amazon EC2) that limits ``instance_type`` with ``lifecycle``.

    Spot and On-Demand quotas count vCPUs per instance-family group.
    """
    family = instance_type.split(".", 1)[0]
    spot = lifecycle != "on-demand"
    table = _SPOT_QUOTAS if spot else _ON_DEMAND_QUOTAS
    for prefix in sorted(table, key=len, reverse=True):
        if family.startswith(prefix):
            return table[prefix]
    return (
        "the Spot Instance Requests quota of the instance family"
        if spot
        else "the Running On-Demand instances quota of the instance family"
    )


def quota_advice(pools: Sequence[tuple[Pool | None, str | None]], region: str | None = None) -> str:
    """What to raise, for the pools a quota error named: each quota once, with the vCPUs one instance needs."""
    needs: dict[str, int] = {}
    for pool, lifecycle in pools:
        if pool is None:
            continue
        name = quota_name(pool.instance_type, lifecycle)
        info = GPU_CATALOG.get(pool.instance_type)
        needs[name] = max(needs.get(name, 0), info.vcpus if info else 0)
    where = f" in {region}" if region else ""
    if not needs:
        return (
            f"raise the EC2 vCPU quota of the instance family in Service Quotas{where} "
            "(Service Quotas > AWS services > Amazon EC2)"
        )
    wanted = "; ".join(
        f"'{name}' to at least {vcpus} vCPUs" if vcpus else f"'{name}'" for name, vcpus in needs.items()
    )
    return f"request a quota increase in Service Quotas{where} (Amazon EC2): {wanted}"


def configuration_advice(code: str) -> str:
    """What to change for a configuration error code."""
    for prefix, advice in _CONFIGURATION_ADVICE:
        if code.startswith(prefix):
            return advice
    return "EC2 refused the request with an error spotrun does not recognise: see the code and message"


def call_error_response(code: str, message: str) -> dict[str, Any]:
    """A CreateFleet response carrying an error EC2 raised for the whole call.

    A refused call (``ClientError``) concerns every pool: put as the response's only error, it goes through
    the same reading and classification as the per-pool errors of an instant fleet.
    """
    return {"Instances": [], "Errors": [{"ErrorCode": code, "ErrorMessage": message}]}


def error_code_of(response: Mapping[str, Any]) -> list[str]:
    """The error codes of a CreateFleet response, in order."""
    return [str(item.get("ErrorCode") or "Unknown") for item in response.get("Errors") or []]

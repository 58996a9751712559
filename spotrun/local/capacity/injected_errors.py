"""CreateFleet errors a test or ``local`` user injects: queued by code, used up one CreateFleet call each.

:mod:`spotrun.local.patches.ec2` takes one per CreateFleet call: a call-level code (:data:`CALL_LEVEL_ERRORS`)
refuses the whole call, any other fails every pool of the request in the instant fleet's ``Errors``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

# Codes EC2 raises for a CreateFleet call as a whole (the request is refused before any pool is tried), as
# opposed to the per-pool entries of an instant fleet's Errors (capacity, price, quotas, Unsupported...).
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
CALL_LEVEL_ERRORS = frozenset(
    {
        "UnauthorizedOperation",
        "AuthFailure",
        "OptInRequired",
        "PendingVerification",
        "Blocked",
        "InvalidLaunchTemplateName.NotFoundException",
        "InvalidLaunchTemplateName.MalformedException",
        "InvalidLaunchTemplateId.NotFound",
        "InvalidLaunchTemplateId.Malformed",
        "InvalidLaunchTemplateId.VersionNotFound",
    }
)

_INJECTED_MESSAGES = {
    "MaxSpotInstanceCountExceeded": "Max spot instance count exceeded",
    "VcpuLimitExceeded": (
        "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the instance "
        "bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/"
        "ec2-request to request an adjustment to this limit."
    ),
    "InstanceLimitExceeded": "You have requested more instances than your current instance limit allows.",
    "InvalidLaunchTemplateName.NotFoundException": (
        "The specified launch template, with template name spotrun-agent, does not exist."
    ),
    "UnauthorizedOperation": "You are not authorized to perform this operation.",
    "Unsupported": "The requested configuration is currently not supported. Please check the documentation.",
    "InvalidParameterValue": "Value for parameter is invalid.",
}


def injected_message(code: str) -> str:
    """A message like EC2's for an injected error code."""
    return _INJECTED_MESSAGES.get(code, f"{code} (injected by the emulator)")


@dataclass
class _Injected:
    code: str
    message: str
    calls_left: int


class InjectedFleetErrors:
    """Thread-safe queue of injected CreateFleet errors, oldest first, each for a number of calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[_Injected] = []  # oldest first

    def inject(self, code: str, count: int = 1, message: str | None = None) -> None:
        """Make the next ``count`` CreateFleet calls fail with ``code``.

        A call-level code (:data:`CALL_LEVEL_ERRORS`) refuses the whole call; any other fails every pool of
        the request, as an instant fleet's ``Errors`` do.

        Raises
        ------
        ValueError
            When ``code`` is empty or ``count`` is below 1.
        """
        if not code:
            raise ValueError("an error code is required")
        if count < 1:
            raise ValueError(f"count must be at least 1, got {count}")
        with self._lock:
            self._entries.append(_Injected(code, message or injected_message(code), count))

    def clear(self) -> None:
        """Forget every injected CreateFleet error."""
        with self._lock:
            self._entries.clear()

    def take(self) -> tuple[str, str] | None:
        """The injected error for this CreateFleet call, if any (each call uses up one)."""
        with self._lock:
            if not self._entries:
                return None
            entry = self._entries[0]
            entry.calls_left -= 1
            if entry.calls_left <= 0:
                self._entries.pop(0)
            return entry.code, entry.message

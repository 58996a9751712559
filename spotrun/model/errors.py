"""Errors the workflow routes on.

The Lambda Python runtime reports an uncaught exception's class ``__name__`` as ``errorType``, and Step
Functions matches that name in ``Retry``/``Catch``. Each class here therefore takes its dotted ASL error name
as its ``__name__``, so ``raise CapacityUnavailable(...)`` in a handler becomes ``Capacity.Unavailable`` in
the state machine, on AWS and in the emulator alike.
"""

from __future__ import annotations

from typing import ClassVar


class SpotrunError(Exception):
    """Base of the errors that the state machine routes by name."""

    error_name: ClassVar[str] = "Spotrun.Error"

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.__name__ = cls.error_name


class ManifestInvalid(SpotrunError):
    """The manifest failed validation."""

    error_name = "Manifest.Invalid"


class CapacityUnavailable(SpotrunError):
    """No pool could supply an instance right now."""

    error_name = "Capacity.Unavailable"


class CapacityMaxWaitExceeded(SpotrunError):
    """The job waited for capacity longer than its ``capacity.max_wait_minutes``, counted over all its waits."""

    error_name = "Capacity.MaxWaitExceeded"


class CapacityQuotaExceeded(SpotrunError):
    """EC2 refused the launch for an account quota (e.g. a Spot vCPU quota of 0): waiting will not help."""

    error_name = "Capacity.QuotaExceeded"


class CapacityConfigurationError(SpotrunError):
    """EC2 refused the launch for the request itself (no launch template, denied, unsupported type)."""

    error_name = "Capacity.ConfigurationError"


class InstanceNotManaged(SpotrunError):
    """The instance runs but its SSM agent never registered, so no command can reach it."""

    error_name = "Instance.NotManaged"


class InstancesNotReleased(SpotrunError):
    """EC2 has not confirmed the termination of every instance of the job yet (eventual consistency)."""

    error_name = "Instances.ReleasePending"


class InstanceLost(SpotrunError):
    """The job's instance terminated or failed before it became ready."""

    error_name = "Instance.Lost"


class InstanceBootTimeout(SpotrunError):
    """The instance did not become ready in time."""

    error_name = "Instance.BootTimeout"


class InterruptionsExceeded(SpotrunError):
    """The job lost its capacity more often than its manifest tolerates."""

    error_name = "Interruptions.Exceeded"


class BudgetExceeded(SpotrunError):
    """Continuing would spend more than the manifest's budget."""

    error_name = "Budget.Exceeded"


class MaxRuntimeExceeded(SpotrunError):
    """The job has trained for its ``max_runtime_minutes``, counted over all its attempts."""

    error_name = "Training.MaxRuntimeExceeded"


class JobNotFound(SpotrunError):
    """No job has that id."""

    error_name = "Job.NotFound"


class InvalidTransition(SpotrunError):
    """A status change that the job's life cycle does not allow."""

    error_name = "Job.InvalidTransition"


class ConcurrentUpdate(SpotrunError):
    """Someone else changed the job record first; read it again and retry."""

    error_name = "Job.ConcurrentUpdate"


class InvalidPageToken(SpotrunError):
    """A listing's continuation token that the listing did not make."""

    error_name = "Request.InvalidPageToken"


class JobFinished(SpotrunError):
    """The job has ended: it cannot be cancelled any more."""

    error_name = "Job.Finished"


class RequestRejected(SpotrunError):
    """A request the API refuses (bad manifest, unknown attempt, nothing to restore), with its problems."""

    error_name = "Request.Rejected"

    def __init__(self, message: str, errors: list[str] | None = None, status: int = 422):
        super().__init__(message)
        self.message = message
        self.errors = errors or []
        self.status = status


class ScheduleNotFound(SpotrunError):
    """No schedule has that name."""

    error_name = "Schedule.NotFound"


class OutputsInvalid(SpotrunError):
    """The list of uploaded outputs the agent stored does not match what it reported."""

    error_name = "Outputs.Invalid"

"""Waiting for capacity: why each pool gave no instance, since when the job waits, and when it stops waiting.

Pure. While no pool can supply an instance, the job record keeps a :class:`CapacityWait`: when the wait began
and, per pool (instance type x zone), the last error CreateFleet gave for it. It is cleared when an instance is
acquired (its duration then adds to the job's total), and kept when the job ends because of the wait, so the
failed record still says why.

``capacity.max_wait_minutes`` bounds the time the job spends waiting, summed over all its waits (the first
acquisition and each one after an interruption), like SageMaker's ``MaxWaitTimeInSeconds`` bounds a managed spot
job's total time (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_StoppingCondition.html); spotrun
counts only the waiting, since ``training.max_runtime_minutes`` already bounds the training.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final

from pydantic import Field

from spotrun.model.base import RecordModel
from spotrun.model.capacity.candidates import Lifecycle, Pool
from spotrun.model.errors import CapacityMaxWaitExceeded

# A launch's errors come from its caller: the job record's readers need not load the fleet request.
if TYPE_CHECKING:
    from spotrun.model.capacity.fleet_request import FleetLaunchError

# Bounds on what a wait keeps in the record (a DynamoDB item is at most 400 KB): one entry per pool, at most
# this many pools (the most recent answers), and EC2's message cut to this length.
MAX_POOLS_KEPT: Final = 100
MAX_MESSAGE_CHARS: Final = 200


class PoolWaitError(RecordModel):
    """The last error CreateFleet gave for one pool while the job waited."""

    instance_type: str
    availability_zone: str
    lifecycle: Lifecycle | None = Field(None, description="What was asked of the pool: spot or on-demand.")
    code: str = Field(description="CreateFleet's ErrorCode, e.g. InsufficientInstanceCapacity.")
    message: str = Field("", max_length=MAX_MESSAGE_CHARS, description="EC2's ErrorMessage, shortened.")
    at: datetime = Field(description="When EC2 gave this answer.")

    @property
    def pool(self) -> Pool:
        """The pool the error concerns."""
        return Pool(self.instance_type, self.availability_zone)


class CapacityWait(RecordModel):
    """A job waiting for capacity: since when, and the last answer of each pool."""

    since: datetime = Field(description="When this wait began (the first launch that found no capacity).")
    pools: list[PoolWaitError] = Field(
        default_factory=list,
        max_length=MAX_POOLS_KEPT,
        description="The last error per pool, newest answers first; at most one entry per pool.",
    )
    note: str | None = Field(
        None,
        max_length=500,
        description="Why, when no pool says: the deadline policy's decision to wait, or an answer naming no pool.",
    )

    def reasons(self) -> str:
        """``SpotMaxPriceTooLow in g4dn.xlarge/us-east-1a; InsufficientInstanceCapacity in g5.xlarge/us-east-1a``.

        The pools grouped by code (and lifecycle when on-demand was asked), then the note.
        """
        groups: dict[tuple[str, Lifecycle | None], list[str]] = {}
        for error in self.pools:
            groups.setdefault((error.code, error.lifecycle), []).append(str(error.pool))
        parts = [
            f"{code}{' (on-demand)' if lifecycle == 'on-demand' else ''} in {', '.join(pools)}"
            for (code, lifecycle), pools in groups.items()
        ]
        if self.note:
            parts.append(self.note)
        return "; ".join(parts) or "no answer recorded"


class CapacityWaitView(CapacityWait):
    """The wait as the API shows it: with its reasons in one line."""

    reasons_text: str = Field(
        description="Each pool's last error, grouped by code: SpotMaxPriceTooLow in g4dn.xlarge/us-east-1a; ..."
    )


def wait_view(wait: CapacityWait) -> CapacityWaitView:
    """The wait with its reasons spelt out, for the API's view of the job."""
    return CapacityWaitView(**dict(wait), reasons_text=wait.reasons())


def _lifecycle(value: str | None) -> Lifecycle | None:
    if value == "spot":
        return "spot"
    if value == "on-demand":
        return "on-demand"
    return None


def _shorten(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE_CHARS else message[: MAX_MESSAGE_CHARS - 1] + "\u2026"


def still_waiting(
    wait: CapacityWait | None,
    errors: Sequence[FleetLaunchError],
    now: datetime,
    note: str | None = None,
) -> CapacityWait:
    """The wait after one more launch found no capacity.

    Parameters
    ----------
    wait
        The wait so far, or None when this launch begins one.
    errors
        The launch's errors, as CreateFleet returned them (both lifecycles' when spot fell back to on-demand).
    now
        When the launch was answered.
    note
        Why, besides the pools (the deadline policy's decision to wait); an error naming no pool is added to it.

    Returns
    -------
    CapacityWait
        Since the first launch of the wait; each pool's entry replaced by its newest answer (on-demand after spot
        in the same launch), pools not asked this time kept, at most :data:`MAX_POOLS_KEPT`.
    """
    latest: dict[Pool, PoolWaitError] = {}
    unplaced = []
    for error in errors:
        if error.pool is None:
            unplaced.append(f"{error.code}: {error.message}" if error.message else error.code)
            continue
        latest.pop(error.pool, None)  # the later answer for the pool stands, in its own place
        latest[error.pool] = PoolWaitError(
            instance_type=error.pool.instance_type,
            availability_zone=error.pool.availability_zone,
            lifecycle=_lifecycle(error.lifecycle),
            code=error.code,
            message=_shorten(error.message),
            at=now,
        )
    earlier = [] if wait is None else [entry for entry in wait.pools if entry.pool not in latest]
    why = "; ".join([*([note] if note else []), *unplaced]) or None
    return CapacityWait(
        since=now if wait is None else wait.since,
        pools=[*latest.values(), *earlier][:MAX_POOLS_KEPT],
        note=None if why is None else why[:500],
    )


def waited_seconds(wait: CapacityWait | None, earlier_seconds: float, now: datetime) -> float:
    """Seconds the job has waited for capacity: its ended waits plus the current one up to ``now``."""
    current = 0.0 if wait is None else max(0.0, (now - wait.since).total_seconds())
    return earlier_seconds + current


def check_max_wait(
    wait: CapacityWait, earlier_seconds: float, max_wait_seconds: float, now: datetime, job_id: str
) -> None:
    """End the wait when the job has waited longer than it may.

    Parameters
    ----------
    wait
        The current wait (after this launch's answers).
    earlier_seconds
        What the job's ended waits took.
    max_wait_seconds
        ``capacity.max_wait_minutes`` in seconds (scaled in the emulator).
    now
        The current time.
    job_id
        For the message.

    Raises
    ------
    CapacityMaxWaitExceeded
        Past the limit, with the reasons per pool and since when the job waits.
    """
    total = waited_seconds(wait, earlier_seconds, now)
    if total <= max_wait_seconds:
        return
    minutes = max_wait_seconds / 60
    earlier = f" (with {earlier_seconds / 60:.1f} min of earlier waits)" if earlier_seconds else ""
    raise CapacityMaxWaitExceeded(
        f"job {job_id} waited for capacity longer than capacity.max_wait_minutes ({minutes:g} min): waiting "
        f"since {wait.since.isoformat(timespec='seconds')}{earlier}. Last answer per pool: {wait.reasons()}"
    )


def wait_line(wait: CapacityWait, now: datetime, ended: bool = False) -> str:
    """``waiting for capacity since 17:02 UTC (12 min): SpotMaxPriceTooLow in g4dn.xlarge/us-east-1a; ...``.

    ``ended``: the job ended during the wait (``waited for capacity from 17:02 UTC (60 min): ...``), ``now`` its end.
    """
    minutes = int(max(timedelta(0), now - wait.since).total_seconds() // 60)
    start = wait.since.strftime("%H:%M UTC")
    lead = f"waited for capacity from {start}" if ended else f"waiting for capacity since {start}"
    return f"{lead} ({minutes} min): {wait.reasons()}"

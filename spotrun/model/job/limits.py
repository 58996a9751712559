"""A job's two limits, counted over all its attempts: ``budget.max_usd`` and ``training.max_runtime_minutes``.

Pure decisions over the job record; the handlers call them at four points:

- submission refuses a budget that could not pay for one boot of the cheapest candidate
  (:func:`admission_problems`);
- acquire refuses a new attempt, and the interruption handler a standby, that the remaining budget cannot pay
  EC2's billing minimum of, or that the used-up runtime allowance could not use (:func:`next_attempt_refusal`);
- the train step carries what is left: ``stop_at``, when the budget runs out at this attempt's price less a
  margin for the checkpoint upload, and ``max_runtime_seconds``, the training time not yet used
  (:func:`train_limits`); the agent stops the command there as on an interruption notice, commits its
  checkpoint and reports ``Budget.Exceeded`` or ``Training.MaxRuntimeExceeded``;
- finalize records what was used of each (:func:`limits_report`).

Spend comes from :func:`spotrun.model.capacity.pricing.job_cost` (the price each attempt actually paid,
per-second billing with EC2's 60-second minimum), so the limit and the job's reported cost are the same
figure. Training time is the time the record spent in ``TRAINING``, in real seconds: the emulator's time
scale never applies to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from spotrun.model.capacity.candidates import Lifecycle, candidate_types, choose_lifecycle
from spotrun.model.capacity.pricing import BILLING_MINIMUM_SECONDS, job_cost
from spotrun.model.errors import BudgetExceeded, ManifestInvalid, MaxRuntimeExceeded, SpotrunError
from spotrun.model.job.attempt import Attempt
from spotrun.model.job.record import Job, JobStatus, LimitsReport, timeline_durations
from spotrun.model.manifest.schema import JobManifest

# AWS sells spot capacity at "up to 90% off the On-Demand price" (https://aws.amazon.com/ec2/spot/pricing/):
# 10 % of on-demand is the lowest a spot instance can be expected to cost before its pool is known.
SPOT_FLOOR_SHARE = 0.10

# Exit codes of ``spotrun submit --wait`` / ``status`` for a job that ended at one of its limits (1: other failure).
EXIT_BUDGET_EXCEEDED = 3
EXIT_MAX_RUNTIME_EXCEEDED = 4
_EXIT_CODES = {
    BudgetExceeded.error_name: EXIT_BUDGET_EXCEEDED,
    MaxRuntimeExceeded.error_name: EXIT_MAX_RUNTIME_EXCEEDED,
}


@dataclass(frozen=True)
class TrainLimits:
    """What the train step may still use: the agent enforces both."""

    stop_at: datetime | None  # None: no budget
    max_runtime_seconds: float


def spent_usd(job: Job, now: datetime) -> float:
    """What the job's instances have cost so far, the standby included, running ones up to ``now``."""
    billed = job.billed_instances()
    return job_cost(billed, now=now).usd if billed else 0.0


def training_seconds_used(job: Job, now: datetime) -> float:
    """Seconds the job has spent in ``TRAINING`` over all its attempts (the current one up to ``now``)."""
    return sum(seconds for status, seconds in timeline_durations(job, now) if status is JobStatus.TRAINING)


def _cheapest_boot(manifest: JobManifest, lifecycle: Lifecycle) -> tuple[str, float, float]:
    """The cheapest candidate, its estimated price for ``lifecycle``, and EC2's billing minimum at it."""
    cheapest = candidate_types(manifest.resources)[0]
    price = cheapest.on_demand_usd_per_hour
    if lifecycle == "spot":
        price *= SPOT_FLOOR_SHARE
    # Every node of the group bills its own minimum.
    return cheapest.name, price, price * BILLING_MINIMUM_SECONDS / 3600 * manifest.resources.nodes


def admission_problems(manifest: JobManifest) -> list[str]:
    """Refuse a budget that could not pay one boot of the cheapest candidate pool.

    Parameters
    ----------
    manifest
        A valid manifest.

    Returns
    -------
    list[str]
        One line naming ``budget.max_usd`` when even EC2's billing minimum of the cheapest candidate (at its
        on-demand price, or at the lowest spot price, whichever the policy buys first) passes the budget.
    """
    max_usd = manifest.budget.max_usd
    if max_usd is None:
        return []
    lifecycle = choose_lifecycle(manifest.capacity, 0, spot_unavailable=False)
    try:
        name, price, minimum = _cheapest_boot(manifest, lifecycle)
    except ManifestInvalid:
        return []  # no candidate at all: the resources check reports that
    if max_usd >= minimum:
        return []
    estimate = (
        "on-demand" if lifecycle == "on-demand" else f"{SPOT_FLOOR_SHARE:.0%} of on-demand, the lowest spot"
    )
    return [
        f"budget.max_usd: {max_usd:g} USD cannot pay even EC2's {BILLING_MINIMUM_SECONDS}-second billing "
        f"minimum of the cheapest candidate, {name} at {price:.4f} USD/h ({estimate} price): "
        f"raise it to at least {minimum:.4f}"
    ]


def next_attempt_refusal(job: Job, *, interruptions: int, now: datetime) -> SpotrunError | None:
    """Why the job may not launch another instance, or None when it may.

    Parameters
    ----------
    job
        The job, with its past attempts (and standby).
    interruptions
        Interruptions to count for the lifecycle the launch would buy first (one more for a standby).
    now
        The current time.

    Returns
    -------
    SpotrunError | None
        :class:`MaxRuntimeExceeded` when the job has trained for its whole allowance;
        :class:`BudgetExceeded` when the budget left cannot pay the billing minimum of the cheapest candidate
        (estimated as at submission); None otherwise.
    """
    manifest = job.require_manifest()
    allowance = manifest.training.max_runtime_minutes * 60.0
    used = training_seconds_used(job, now)
    if used >= allowance:
        return MaxRuntimeExceeded(
            f"job {job.job_id} has trained {used:.0f} s over {len(job.attempts)} attempt(s), its whole "
            f"max_runtime_minutes ({manifest.training.max_runtime_minutes}): no new attempt"
        )
    max_usd = manifest.budget.max_usd
    if max_usd is None:
        return None
    lifecycle = choose_lifecycle(manifest.capacity, interruptions, spot_unavailable=False)
    name, _, minimum = _cheapest_boot(manifest, lifecycle)
    spent = spent_usd(job, now)
    if max_usd - spent < minimum:
        return BudgetExceeded(
            f"job {job.job_id} has spent {spent:.4f} USD of its {max_usd:g} USD budget.max_usd: the "
            f"{max_usd - spent:.4f} USD left cannot pay the billing minimum of another {lifecycle} {name} "
            f"({minimum:.4f} USD)"
        )
    return None


def budget_stop_at(job: Job, attempt: Attempt, *, margin_seconds: float, now: datetime) -> datetime | None:
    """When the job must stop for its budget to hold, at ``attempt``'s price: None without a budget.

    The attempt's own cost counts from its launch (booting and staging included), billed per second with EC2's
    60-second minimum; everything else the job ran is counted up to ``now``. ``margin_seconds`` before the
    budget runs out leaves time to save, upload and commit the checkpoint and to terminate the instance.
    A budget that cannot pay even the attempt's billing minimum gives ``now``.
    """
    max_usd = job.require_manifest().budget.max_usd
    if max_usd is None:
        return None
    if attempt.price_per_hour is None:
        # No figure for this instance in its region: the budget cannot be shown to hold, so stop safely.
        return now
    # Every node of the attempt bills from its own start (a node kept from the attempt before, from that one's
    # end): the budget runs out when their sum reaches what is left.
    mine = attempt.billed()
    own = {(record.instance_id, record.started_at) for record in mine}
    others = [a for a in job.billed_instances() if (a.instance_id, a.started_at) not in own]
    left = max_usd - (job_cost(others, now=now).usd if others else 0.0)
    affordable = left * 3600 / attempt.price_per_hour / len(mine)
    if affordable < BILLING_MINIMUM_SECONDS:
        return now
    start = min(record.started_at for record in mine)
    offsets = sum((record.started_at - start).total_seconds() for record in mine) / len(mine)
    return start + timedelta(seconds=affordable + offsets - margin_seconds)


def train_limits(job: Job, attempt: Attempt, *, margin_seconds: float, now: datetime) -> TrainLimits:
    """What the train step of ``attempt`` may still use.

    Raises
    ------
    MaxRuntimeExceeded
        When the job has no training time left.
    BudgetExceeded
        When the budget runs out before the step could start (booting and staging used it up).
    """
    manifest = job.require_manifest()
    left = manifest.training.max_runtime_minutes * 60.0 - training_seconds_used(job, now)
    if left <= 0:
        raise MaxRuntimeExceeded(
            f"job {job.job_id} has no training time left of its max_runtime_minutes "
            f"({manifest.training.max_runtime_minutes})"
        )
    stop_at = budget_stop_at(job, attempt, margin_seconds=margin_seconds, now=now)
    if stop_at is not None and stop_at <= now:
        raise BudgetExceeded(
            f"job {job.job_id} would pass its budget.max_usd ({manifest.budget.max_usd:g} USD) before "
            f"attempt {attempt.number} could train: booting and staging used up what was left"
        )
    return TrainLimits(stop_at=stop_at, max_runtime_seconds=left)


def limits_report(job: Job, now: datetime) -> LimitsReport:
    """What the job used of its limits, for the record."""
    manifest = job.require_manifest()
    return LimitsReport(
        max_usd=manifest.budget.max_usd,
        spent_usd=spent_usd(job, now),
        max_runtime_seconds=manifest.training.max_runtime_minutes * 60.0,
        training_seconds=round(training_seconds_used(job, now), 3),
    )


def limit_details(job: Job, report: LimitsReport) -> list[str]:
    """Lines for the error of a job that ended at a limit: what it used, and how to go on."""
    error = job.error.type if job.error is not None else None
    if error == BudgetExceeded.error_name and report.max_usd is not None:
        return [
            f"spent {report.spent_usd:.4f} USD of budget.max_usd {report.max_usd:g} USD",
            _resume_hint(job),
        ]
    if error == MaxRuntimeExceeded.error_name:
        return [
            f"trained {report.training_seconds:.0f} s of max_runtime_minutes "
            f"{report.max_runtime_seconds / 60:g} over {len(job.attempts)} attempt(s)",
            _resume_hint(job),
        ]
    return []


def _resume_hint(job: Job) -> str:
    return (
        "its committed checkpoints are kept: to go on, submit again with a raised limit and "
        f"training.resume_from: {job.job_id}"
    )


def exit_code(status: str, error_type: str | None) -> int:
    """The CLI's exit code for a job that ended: 0 succeeded, 3 budget, 4 max runtime, 1 otherwise."""
    if status == JobStatus.SUCCEEDED.value:
        return 0
    return _EXIT_CODES.get(error_type or "", 1)

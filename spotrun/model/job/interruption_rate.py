"""The pool's interruption rate, as the control plane knows it, for ``checkpoint.interval_steps: auto``.

Pure. The control plane puts a :class:`PoolRate` in each ``train`` command; the agent, which alone measures how
long a save takes, turns it into the rate of *uncovered* interruptions
(:func:`spotrun.model.checkpoint_interval.uncovered_fraction`) and the interval
(:func:`~spotrun.model.checkpoint_interval.auto_interval`).

The estimate is the job's own spot history with a prior: a Gamma prior worth one interruption in
:data:`PRIOR_SPOT_HOURS` spot hours (the rate), and a Beta prior worth one interruption of which
:data:`PRIOR_SILENT_FRACTION` is silent (the share the notice does not cover). So a new job starts from the prior,
and each attempt moves the estimate towards what the job has seen. The silent share is the simulator's default
(:class:`spotrun.model.simulation.replay.SimJob`), so the bench and the agent start from the same assumption.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import ConfigDict, Field

from spotrun.model.base import DeferredModel
from spotrun.model.job.attempt import INTERRUPTION_REASONS
from spotrun.model.job.record import Job

PRIOR_SPOT_HOURS = 24.0
PRIOR_SILENT_FRACTION = 0.05
# The interruption warning EC2 gives a spot instance: "two minutes before Amazon EC2 stops or terminates your
# Spot Instance" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html).
NOTICE_SECONDS = 120.0


class PoolRate(DeferredModel):
    """How often the job's spot capacity is taken away, and how much of that comes without a notice."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    interruptions_per_hour: float = Field(ge=0, description="Interruptions per spot hour (estimate).")
    silent_fraction: float = Field(
        ge=0, le=1, description="Share of them that come without the notice (the instance just dies)."
    )
    basis: str = Field(description="Where the estimate comes from, for the job's record.")


def prior_rate() -> PoolRate:
    """The prior alone: for a train command that carries no estimate."""
    return PoolRate(
        interruptions_per_hour=1 / PRIOR_SPOT_HOURS,
        silent_fraction=PRIOR_SILENT_FRACTION,
        basis=f"the prior: 1 interruption in {PRIOR_SPOT_HOURS:g} h, {PRIOR_SILENT_FRACTION:.0%} silent",
    )


def pool_rate(job: Job, now: datetime) -> PoolRate:
    """Estimate the job's spot interruption rate from its attempts so far and the prior (module docstring).

    Parameters
    ----------
    job
        The job record: its spot attempts, how long each ran and how each ended.
    now
        The current time (an open attempt counts up to it).

    Returns
    -------
    PoolRate
        The estimate, with its basis spelled out.
    """
    spot = [attempt for attempt in job.attempts if attempt.lifecycle == "spot"]
    hours = sum(
        max(0.0, ((attempt.ended_at or now) - attempt.started_at).total_seconds()) / 3600 for attempt in spot
    )
    interrupted = [attempt for attempt in spot if attempt.end_reason in INTERRUPTION_REASONS]
    silent = sum(1 for attempt in interrupted if attempt.notice_at is None)  # no warning came
    return rate_from_counts(hours, len(interrupted), silent, basis=" of this job")


def rate_from_counts(
    spot_hours: float,
    interruptions: int,
    silent: int,
    prior_spot_hours: float = PRIOR_SPOT_HOURS,
    basis: str = "",
) -> PoolRate:
    """The estimate from what a job has seen (the one estimator: :func:`pool_rate` and the simulator call it).

    Parameters
    ----------
    spot_hours
        The job's time on spot so far.
    interruptions, silent
        Its spot attempts that ended in an interruption, and those of them that came without a notice.
    prior_spot_hours
        The Gamma prior: one interruption in this many spot hours (:data:`PRIOR_SPOT_HOURS`).
    basis
        Said after "spot h" in the basis (where the hours come from).

    Returns
    -------
    PoolRate
        ``(1 + interruptions) / (prior + spot_hours)`` per hour, silent share ``(prior share + silent) /
        (1 + interruptions)``.
    """
    rate = (1 + interruptions) / (prior_spot_hours + spot_hours)
    fraction = (PRIOR_SILENT_FRACTION + silent) / (1 + interruptions)
    text = (
        f"{interruptions} interruption(s), {silent} without notice, in {spot_hours:.2f} spot h{basis}, "
        f"with a prior of 1 in {prior_spot_hours:g} h, {PRIOR_SILENT_FRACTION:.0%} silent"
    )
    return PoolRate(interruptions_per_hour=rate, silent_fraction=fraction, basis=text)

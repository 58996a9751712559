"""The deadline policy applied to a stored job: its live state, the decision, and the decision's record.

Pure. The control plane asks :func:`decide_for_job` at each acquisition (and while the job runs on spot); the
policy itself, shared with ``spotrun simulate``, is :func:`spotrun.model.deadline.decide`.

What the control plane knows of the job, and what it assumes (:class:`DeadlineAssumptions`, documented in
docs/deadlines.md):

- work done: the job's time in ``TRAINING`` over all attempts (at the policy's rate: less its saves), against
  ``training.expected_hours``;
- elapsed and deadline: from the job's submission (``created_at``) and ``capacity.deadline``, in real time
  like ``training.max_runtime_minutes`` (the emulator scales AWS's durations, not the job's own: its
  assumptions are :meth:`DeadlineAssumptions.scaled`);
- spot availability: false while the job waits for capacity (its last spot request found none), or when the
  launch just tried spot and got none;
- prices: the cheapest candidate type's on-demand price from the catalog; spot at the last price the job paid
  for spot, else :attr:`DeadlineAssumptions.spot_share` of on-demand;
- the pool's preemption rate and the share of preemptions that lose work: the job's own spot history
  (:func:`spot_history`), turned into the knobs by :func:`spotrun.model.deadline_inputs.policy_params`, the
  simulator's home for them too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from spotrun.model.capacity import candidate_types
from spotrun.model.deadline import (
    Decision,
    JobState,
    PolicyParams,
    Running,
    deadline_feasible,
    decide,
    run_rate,
)
from spotrun.model.deadline_inputs import SpotHistory, policy_params
from spotrun.model.deadline_spec import deadline_hours
from spotrun.model.interruption_rate import NOTICE_SECONDS, PRIOR_SPOT_HOURS
from spotrun.model.job import INTERRUPTION_REASONS, Job, LifecycleDecision
from spotrun.model.limits import training_seconds_used
from spotrun.model.manifest import JobManifest

POLICY = "spotrun"


@dataclass(frozen=True)
class DeadlineAssumptions:
    """What the control plane cannot measure before the job runs, in hours.

    Attributes
    ----------
    restart_hours:
        A changeover: launch, boot, staging and restoring the checkpoint.
    checkpoint_hours, checkpoint_interval_hours:
        One save, and the training between two.
    tick_hours:
        How stale a decision may be before the next one (heartbeats come far more often).
    spot_share:
        Spot's price as a share of on-demand when the job has paid none yet.
    notice_hours:
        EC2's interruption notice: a save longer than it loses the unsaved work at every preemption.
    prior_spot_hours:
        The preemption rate's prior (:mod:`spotrun.model.deadline_inputs`).
    """

    restart_hours: float = 0.1
    checkpoint_hours: float = 1 / 60
    checkpoint_interval_hours: float = 0.5
    tick_hours: float = 1 / 60
    spot_share: float = 0.35
    notice_hours: float = NOTICE_SECONDS / 3600
    prior_spot_hours: float = PRIOR_SPOT_HOURS

    def scaled(self, time_scale: float) -> DeadlineAssumptions:
        """The durations as the emulator runs them (``time_scale`` real seconds per AWS second)."""
        return replace(
            self,
            restart_hours=self.restart_hours * time_scale,
            checkpoint_hours=self.checkpoint_hours * time_scale,
            checkpoint_interval_hours=self.checkpoint_interval_hours * time_scale,
            tick_hours=self.tick_hours * time_scale,
            notice_hours=self.notice_hours * time_scale,
            prior_spot_hours=self.prior_spot_hours * time_scale,
        )


ASSUMED = DeadlineAssumptions()


def feasibility_problem(
    manifest: JobManifest, submitted_at: datetime, assumed: DeadlineAssumptions = ASSUMED
) -> str | None:
    """Why even on-demand could not meet the manifest's deadline, or None (also None without a deadline)."""
    deadline, work = manifest.capacity.deadline, manifest.training.expected_hours
    if deadline is None or work is None:
        return None
    hours = deadline_hours(deadline, submitted_at)
    feasible, slack = deadline_feasible(
        work, hours, assumed.restart_hours, assumed.checkpoint_hours, assumed.checkpoint_interval_hours
    )
    if feasible:
        return None
    return (
        f"capacity.deadline: {deadline!r} leaves {_span(hours)} after submission; training.expected_hours "
        f"({work:g} h) on on-demand from the start takes {_span(hours - slack)} (with a "
        f"{_span(assumed.restart_hours)} start and checkpoints), {_span(-slack)} more: move the deadline or "
        "shorten the work"
    )


def _span(hours: float) -> str:
    # Hours to two decimals, or minutes when that would round a short job's numbers away (the emulator's).
    return f"{hours:.2f} h" if abs(hours) >= 0.1 else f"{hours * 60:.1f} min"


def spot_history(job: Job, now: datetime) -> SpotHistory:
    """The job's spot time (an open attempt up to ``now``), its interruptions and those without a notice."""
    spot = [attempt for attempt in job.attempts if attempt.lifecycle == "spot"]
    preempted = [attempt for attempt in spot if attempt.end_reason in INTERRUPTION_REASONS]
    return SpotHistory(
        spot_hours=sum(((a.ended_at or now) - a.started_at).total_seconds() / 3600 for a in spot),
        preemptions=len(preempted),
        silent=sum(1 for attempt in preempted if attempt.notice_at is None),
    )


def _work_done_hours(job: Job, now: datetime, assumed: DeadlineAssumptions) -> float:
    # Training time advances the work at the policy's own rate (its saves take the rest), so that a job that
    # trains without pause keeps its slack, and only time away from training (boots, staging, restarts) uses it.
    rate = run_rate(assumed.checkpoint_hours, assumed.checkpoint_interval_hours)
    return training_seconds_used(job, now) / 3600 * rate


def job_state(
    job: Job, now: datetime, *, running: Running, spot_available: bool, assumed: DeadlineAssumptions = ASSUMED
) -> JobState:
    """The job's :class:`~spotrun.model.deadline.JobState` as the control plane knows it at ``now``."""
    manifest = job.require_manifest()
    deadline, work = manifest.capacity.deadline, manifest.training.expected_hours
    if deadline is None or work is None:
        raise ValueError(f"job {job.job_id} has no capacity.deadline")
    on_demand = candidate_types(manifest.resources)[0].on_demand_usd_per_hour
    paid = [a.price_per_hour for a in job.attempts if a.lifecycle == "spot" and a.price_per_hour is not None]
    return JobState(
        work_hours=work,
        work_done_hours=_work_done_hours(job, now, assumed),
        elapsed_hours=(now - job.created_at).total_seconds() / 3600,
        deadline_hours=deadline_hours(deadline, job.created_at),
        restart_hours=assumed.restart_hours,
        checkpoint_hours=assumed.checkpoint_hours,
        checkpoint_interval_hours=assumed.checkpoint_interval_hours,
        running=running,
        spot_available=spot_available,
        spot_price=paid[-1] if paid else on_demand * assumed.spot_share,
        on_demand_price=on_demand,
    )


def job_params(job: Job, now: datetime, assumed: DeadlineAssumptions = ASSUMED) -> PolicyParams:
    """The policy's knobs for this job: the assumptions and its own spot history (one home with the simulator's,
    :func:`spotrun.model.deadline_inputs.policy_params`)."""
    return policy_params(
        spot_history(job, now),
        restart_hours=assumed.restart_hours,
        checkpoint_hours=assumed.checkpoint_hours,
        checkpoint_interval_hours=assumed.checkpoint_interval_hours,
        tick_hours=assumed.tick_hours,
        notice_hours=assumed.notice_hours,
        prior_spot_hours=assumed.prior_spot_hours,
    )


def decide_for_job(
    job: Job, now: datetime, *, running: Running, spot_available: bool, assumed: DeadlineAssumptions = ASSUMED
) -> Decision:
    """spotrun's policy (:func:`~spotrun.model.deadline.decide`) on the job's live state."""
    state = job_state(job, now, running=running, spot_available=spot_available, assumed=assumed)
    return decide(POLICY, state, job_params(job, now, assumed))


def decision_record(decision: Decision, job: Job, now: datetime) -> LifecycleDecision:
    """The decision as the job's record keeps it."""
    return LifecycleDecision(
        at=now,
        choice=decision.choice.value,
        slack_hours=round(decision.slack_hours, 4),
        # The rate is the same at every time scale (save and interval scale alike).
        work_done_hours=round(_work_done_hours(job, now, ASSUMED), 4),
        reason=decision.reason,
    )


def with_decision(job: Job, decision: Decision, now: datetime) -> Job:
    """The job with the decision on its record, unless it repeats the last one's choice.

    A job waiting for spot decides again at every poll, a running one at every heartbeat; only a change of
    choice is news, and the record (one DynamoDB item) must not grow with the wait.
    """
    made = decision_record(decision, job, now)
    last = job.deadline_decisions[-1] if job.deadline_decisions else None
    if last is not None and last.choice == made.choice:
        return job
    return job.model_copy(update={"deadline_decisions": [*job.deadline_decisions, made]})


def decision_note(decision: Decision) -> str:
    """The decision for the timeline: ``deadline: spot, slack 3.20 h (why)``."""
    return f"deadline: {decision.choice.value}, slack {decision.slack_hours:.2f} h ({decision.reason})"

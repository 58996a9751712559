"""The deadline policy applied to a stored job: its live state, the decision, and the decision's record.

Pure. The control plane asks :func:`decide_for_job` at each acquisition (and while the job runs on spot); the
policy itself, shared with ``spotrun simulate``, is :func:`spotrun.model.deadline.policies.decide`.

What the control plane knows of the job, and what it assumes (:class:`DeadlineAssumptions`, documented in
docs/guides/deadlines.md):

- work done: the job's time in ``TRAINING`` over all attempts (at the policy's rate: less its saves), against
  ``training.expected_hours``; or, with ``training.total_steps``, the work learnt from the steps the job reported
  (:mod:`spotrun.model.deadline.work`; before enough of them,
  :func:`~spotrun.model.deadline.work.decide_without_estimate`);
- elapsed and deadline: from the job's submission (``created_at``) and ``capacity.deadline``, in real time
  like ``training.max_runtime_minutes`` (the emulator scales AWS's durations, not the job's own: its
  assumptions are :meth:`DeadlineAssumptions.scaled`);
- spot availability: false while the job waits for capacity (its last spot request found none), or when the
  launch just tried spot and got none;
- prices: the cheapest candidate type's on-demand price from the catalog; spot at the last price the job paid
  for spot, else :attr:`DeadlineAssumptions.spot_share` of on-demand;
- the pool's preemption rate and the share of preemptions that lose work: the job's own spot history
  (:func:`spot_history`), turned into the knobs by :func:`spotrun.model.deadline.inputs.policy_params`, the
  simulator's home for them too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from spotrun.model.capacity.candidates import candidate_types
from spotrun.model.deadline.inputs import SpotHistory, policy_params
from spotrun.model.deadline.policies import decide
from spotrun.model.deadline.state import (
    Choice,
    Decision,
    JobState,
    PolicyParams,
    Running,
    deadline_feasible,
    exposed_hours,
    run_rate,
    slack_hours,
)
from spotrun.model.deadline.work import (
    ESTIMATE_AFTER_HOURS,
    StepsDone,
    WorkEstimate,
    decide_without_estimate,
    from_manifest,
    from_progress,
)
from spotrun.model.job.attempt import INTERRUPTION_REASONS
from spotrun.model.job.deadline_record import LifecycleDecision
from spotrun.model.job.interruption_rate import NOTICE_SECONDS, PRIOR_SPOT_HOURS
from spotrun.model.job.limits import training_seconds_used
from spotrun.model.job.record import Job
from spotrun.model.manifest.deadline import deadline_hours
from spotrun.model.manifest.schema import JobManifest

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
        The preemption rate's prior (:mod:`spotrun.model.deadline.inputs`).
    estimate_after_hours:
        With ``training.total_steps``: the training time before the steps reported make an estimate.
    """

    restart_hours: float = 0.1
    checkpoint_hours: float = 1 / 60
    checkpoint_interval_hours: float = 0.5
    tick_hours: float = 1 / 60
    spot_share: float = 0.35
    notice_hours: float = NOTICE_SECONDS / 3600
    prior_spot_hours: float = PRIOR_SPOT_HOURS
    estimate_after_hours: float = ESTIMATE_AFTER_HOURS

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
            estimate_after_hours=self.estimate_after_hours * time_scale,
        )


ASSUMED = DeadlineAssumptions()

# Admission's answer for a deadline whose work is in steps: there are no hours to check yet.
UNCHECKED = (
    "capacity.deadline cannot be checked until the job reports progress (training.total_steps: its hours are "
    "learnt from the steps it reports)"
)


@dataclass(frozen=True)
class JobDecision(Decision):
    """A decision for a stored job, with the work it planned with (None: not known yet, nor the slack)."""

    work: WorkEstimate | None = None


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


def feasibility_note(manifest: JobManifest) -> str | None:
    """What admission could not check about the manifest's deadline (:data:`UNCHECKED`), or None."""
    training = manifest.training
    if manifest.capacity.deadline is not None and training.expected_hours is None and training.total_steps:
        return UNCHECKED
    return None


def with_feasibility_note(job: Job) -> Job:
    """A new job with what admission could not check on its submission's timeline entry (or as it was)."""
    note = None if job.manifest is None else feasibility_note(job.manifest)
    if note is None or not job.timeline:
        return job
    submitted = job.timeline[0].model_copy(update={"detail": note})
    return job.model_copy(update={"timeline": [submitted, *job.timeline[1:]]})


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


def work_estimate(job: Job, now: datetime, assumed: DeadlineAssumptions = ASSUMED) -> WorkEstimate | None:
    """The job's work: ``training.expected_hours``, or learnt from its progress; None while not known yet.

    Parameters
    ----------
    job
        The stored job (its ``steps_reported`` with ``training.total_steps``).
    now
        The moment of the decision (the training time counted as work done, with ``expected_hours``).
    assumed
        The assumptions (the run rate, and the training time an estimate from steps needs).

    Returns
    -------
    WorkEstimate or None
        None with ``training.total_steps`` before enough progress, or without a deadline's work at all.
    """
    training = job.require_manifest().training
    if training.expected_hours is not None:
        return from_manifest(training.expected_hours, _work_done_hours(job, now, assumed))
    if training.total_steps is None:
        return None
    reported = job.steps_reported
    done = None if reported is None else StepsDone(reported.steps, reported.training_hours)
    return from_progress(
        training.total_steps,
        done,
        run_rate=run_rate(assumed.checkpoint_hours, assumed.checkpoint_interval_hours),
        estimate_after_hours=assumed.estimate_after_hours,
    )


def job_state(
    job: Job, now: datetime, *, running: Running, spot_available: bool, assumed: DeadlineAssumptions = ASSUMED
) -> JobState:
    """The job's :class:`~spotrun.model.deadline.state.JobState` as the control plane knows it at ``now``.

    Raises
    ------
    ValueError
        Without a deadline, or before its work is known (:func:`work_estimate`).
    """
    manifest = job.require_manifest()
    deadline, work = manifest.capacity.deadline, work_estimate(job, now, assumed)
    if deadline is None or work is None:
        raise ValueError(f"job {job.job_id} has no capacity.deadline, or no estimate of its work yet")
    on_demand = candidate_types(manifest.resources)[0].on_demand_usd_per_hour
    paid = [a.price_per_hour for a in job.attempts if a.lifecycle == "spot" and a.price_per_hour is not None]
    return JobState(
        work_hours=work.work_hours,
        work_done_hours=work.work_done_hours,
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


def job_params(
    job: Job, now: datetime, assumed: DeadlineAssumptions = ASSUMED, running: Running | None = None
) -> PolicyParams:
    """The policy's knobs for this job: the assumptions and its own spot history (one home with the simulator's,
    :func:`spotrun.model.deadline.inputs.policy_params`).

    With ``running`` given, the margin holds what a preemption could take now: the open spot attempt's time
    since it began (:func:`spotrun.model.deadline.state.exposed_hours`); without it, a whole interval.
    """
    attempt = job.open_attempt
    if running is None:
        exposed = float("inf")
    elif running is Running.SPOT and attempt is not None and attempt.lifecycle == "spot":
        exposed = exposed_hours(running, (now - attempt.started_at).total_seconds() / 3600)
    else:
        # On on-demand or waiting nothing runs on spot; a move onto spot saves first (the notice it gives).
        exposed = exposed_hours(running, 0.0)
    return policy_params(
        spot_history(job, now),
        restart_hours=assumed.restart_hours,
        checkpoint_hours=assumed.checkpoint_hours,
        checkpoint_interval_hours=assumed.checkpoint_interval_hours,
        tick_hours=assumed.tick_hours,
        notice_hours=assumed.notice_hours,
        prior_spot_hours=assumed.prior_spot_hours,
        exposed_hours=exposed,
    )


def moved_off_spot(job: Job) -> bool:
    """Whether the job's last attempt, ended, was on spot and moved off it by the deadline policy."""
    last = job.attempts[-1] if job.attempts else None
    return last is not None and last.ended_at is not None and last.lifecycle == "spot" and last.deadline_move


def decide_for_job(
    job: Job, now: datetime, *, running: Running, spot_available: bool, assumed: DeadlineAssumptions = ASSUMED
) -> JobDecision:
    """spotrun's policy (:func:`~spotrun.model.deadline.policies.decide`) on the job's live state, with its work.

    Before the work is known (:func:`work_estimate` is None),
    :func:`~spotrun.model.deadline.work.decide_without_estimate`.
    """
    work = work_estimate(job, now, assumed)
    if work is None:
        deadline = job.require_manifest().capacity.deadline
        if deadline is None:
            raise ValueError(f"job {job.job_id} has no capacity.deadline")
        hours = deadline_hours(deadline, job.created_at)
        elapsed = (now - job.created_at).total_seconds() / 3600
        unknown = decide_without_estimate(
            hours - elapsed,
            hours,
            spot_available=spot_available,
            estimate_after_hours=assumed.estimate_after_hours,
        )
        return JobDecision(unknown.choice, unknown.slack_hours, unknown.reason, work=None)
    state = job_state(job, now, running=running, spot_available=spot_available, assumed=assumed)
    if running is Running.NOTHING and moved_off_spot(job):
        # The acquisition after a move off spot goes where the move decided, as the simulator's move does in
        # one step: deciding afresh would see nothing on spot to lose and buy spot again.
        return JobDecision(
            Choice.ON_DEMAND, slack_hours(state), "spotrun: moved off spot by the deadline", work=work
        )
    decided = decide(POLICY, state, job_params(job, now, assumed, running))
    return JobDecision(decided.choice, decided.slack_hours, decided.reason, work=work)


def decision_record(decision: Decision, job: Job, now: datetime) -> LifecycleDecision:
    """The decision as the job's record keeps it: with its work and the work's source when it had one."""
    work = decision.work if isinstance(decision, JobDecision) else None
    known = work is not None or not isinstance(decision, JobDecision)
    return LifecycleDecision(
        at=now,
        choice=decision.choice.value,
        slack_hours=round(decision.slack_hours, 4) if known else None,
        # The rate is the same at every time scale (save and interval scale alike).
        work_done_hours=round(work.work_done_hours if work else _work_done_hours(job, now, ASSUMED), 4),
        reason=decision.reason,
        work_hours=None if work is None else round(work.work_hours, 4),
        work_source=None if work is None else work.source,
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
    """The decision for the timeline: ``deadline: spot, slack 3.20 h (why)``, or ``slack unknown``."""
    return f"deadline: {decision.choice.value}, {slack_text(decision)} ({decision.reason})"


def slack_text(decision: Decision) -> str:
    """``slack 3.20 h``; ``slack unknown`` before the work is known, and the work's source when it is learnt."""
    if isinstance(decision, JobDecision) and decision.work is None:
        return "slack unknown"
    text = f"slack {decision.slack_hours:.2f} h"
    if isinstance(decision, JobDecision) and decision.work and decision.work.source != "manifest":
        text += f", work {decision.work.work_hours:.2f} h from {decision.work.source}"
    return text

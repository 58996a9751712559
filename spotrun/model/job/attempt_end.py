"""What the job record says of an attempt whose capacity went away: its end reason and the steps it lost.

Pure. The record learns the truth in pieces, from events that may arrive twice, late or out of order:

- **When the attempt closes** (``control.interruptions.record_interruption``) it knows the error that ended
  the step, whether a warning was recorded (``notice_at``), the last step reported, and the checkpoints
  committed *so far*. An instance EC2 reclaims may still commit the checkpoint it took on the warning after
  its step was failed (``Instance.Lost`` on the ``shutting-down`` state change): so the steps lost counted
  then are provisional (basis ``latest-commit``).
- **When the next attempt stages** (``control.dispatch``: its ``train`` step carries what staging restored)
  it knows the checkpoint the work actually resumes from: the figure of every earlier attempt still
  provisional is settled against it (basis ``restored``). When no attempt follows, the provisional figure
  stands.
- **A warning delivered after the loss was recorded** (the state change handled first) still turns an end
  without one into ``interrupted``: EC2 sends the warning only for an instance it is about to reclaim
  (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html).

The end reason is ``interrupted`` for an attempt that was warned, whatever error ended its step (the agent's
``Spot.Interrupted``, or the instance lost before that report arrived); the other capacity reasons
(``instance-lost``, ``heartbeat-timeout``, ``boot-timeout``) mean no warning was recorded: a silent loss. All
of them count as interruptions (``job.INTERRUPTION_REASONS``); whether the warning covered the work is
``notice_checkpoint_committed``, and whether one came at all is ``notice_at`` (the pool's silent share,
``spotrun.model.job.interruption_rate``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from spotrun.model.job.attempt import END_DEADLINE_MOVE, INTERRUPTION_REASONS, Attempt, InterruptionReason
from spotrun.model.job.record import Job


def end_reason(caught: InterruptionReason, attempt: Attempt) -> str:
    """The end reason of an attempt whose step ended with the capacity error ``caught``.

    Parameters
    ----------
    caught
        The reason the caught error names (``Spot.Interrupted`` -> ``interrupted``, ``Instance.Lost`` ->
        ``instance-lost``, ...).
    attempt
        The attempt as the record holds it when it closes (its ``notice_at`` and ``deadline_move``).

    Returns
    -------
    str
        ``deadline-move`` for the deadline policy's own notice answered by the agent; ``interrupted`` when a
        warning was recorded (or the agent reported it); otherwise ``caught``.
    """
    if attempt.deadline_move:
        # The notice was the policy's, not EC2's: only the agent's answer to it is a move; an instance lost
        # meanwhile went without a warning of its own.
        return END_DEADLINE_MOVE if caught == "interrupted" else caught
    if attempt.notice_at is not None:
        return "interrupted"
    return caught


def steps_lost_fields(
    attempt: Attempt, last_step: int | None, resumes_from: int | None, *, final: bool
) -> dict[str, Any]:
    """The attempt's fields that say what it lost, counted from the checkpoint of step ``resumes_from``.

    Parameters
    ----------
    attempt
        The attempt (its ``notice_at``).
    last_step
        The last step it reached; None: unknown.
    resumes_from
        The step of the checkpoint the work resumes from; None: none, training starts over.
    final
        True when ``resumes_from`` is what the next attempt restored, False for the latest committed one at the
        close.

    Returns
    -------
    dict
        ``last_step``, ``steps_lost``, ``steps_lost_basis`` and ``notice_checkpoint_committed``, for
        ``model_copy(update=...)``.
    """
    lost = None if last_step is None else max(0, last_step - (resumes_from or 0))
    return {
        "last_step": last_step,
        "steps_lost": lost,
        "steps_lost_basis": None if lost is None else ("restored" if final else "latest-commit"),
        "notice_checkpoint_committed": _notice_checkpoint_committed(attempt.notice_at, lost),
    }


def _notice_checkpoint_committed(notice_at: datetime | None, steps_lost: int | None) -> bool | None:
    # The agent checkpoints the step it stopped at on the notice: nothing lost means that checkpoint committed.
    return None if notice_at is None or steps_lost is None else steps_lost == 0


def settle_steps_lost(job: Job, restored_step: int | None) -> Job:
    """Count the steps lost of every earlier attempt still provisional from the checkpoint just restored.

    Called when an attempt's ``train`` step is sent, with what its staging restored: that checkpoint is the one
    the work resumes from, whichever commits arrived after the earlier attempts closed. Idempotent.

    Parameters
    ----------
    job
        The job, its latest attempt the one that staged.
    restored_step
        The step of the checkpoint staging restored; None: none.

    Returns
    -------
    Job
        The job with those attempts' figures settled (basis ``restored``).
    """
    attempts = list(job.attempts)
    for index, attempt in enumerate(attempts[:-1]):
        if attempt.steps_lost_basis == "latest-commit":
            attempts[index] = attempt.model_copy(
                update=steps_lost_fields(attempt, attempt.last_step, restored_step, final=True)
            )
    return job.model_copy(update={"attempts": attempts})


def late_warning(job: Job, instance_id: str, now: datetime) -> Job | None:
    """The job with a warning that arrived after its instance's attempt was recorded lost, or None.

    Parameters
    ----------
    job
        The job.
    instance_id
        The warned instance.
    now
        When the warning arrived (``notice_at``).

    Returns
    -------
    Job | None
        The job whose attempt on that instance is ``interrupted`` with the notice recorded, when that attempt had
        ended on a capacity loss without one; None when there is nothing to amend (no such attempt, one still
        open, one already warned, or one that ended otherwise: completed, failed, cancelled, moved).
    """
    attempt = next((a for a in reversed(job.attempts) if a.instance_id == instance_id), None)
    if (
        attempt is None
        or attempt.ended_at is None
        or attempt.notice_at is not None
        or attempt.deadline_move
        or attempt.end_reason not in INTERRUPTION_REASONS
    ):
        return None
    committed = _notice_checkpoint_committed(now, attempt.steps_lost)
    warned = attempt.model_copy(
        update={"notice_at": now, "end_reason": "interrupted", "notice_checkpoint_committed": committed}
    )
    attempts = [warned if a.number == attempt.number else a for a in job.attempts]
    return job.model_copy(update={"attempts": attempts})

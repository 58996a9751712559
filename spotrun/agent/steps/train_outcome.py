"""How a train step's command ended, as the failure the step reports: the checkpoint it left, and how its save
went when it was told to save."""

from __future__ import annotations

import signal

from spotrun.agent.checkpoint_store import CommittedCheckpoint
from spotrun.agent.step_context import StepReport
from spotrun.agent.supervision.supervisor import TrainOutcome, describe_exit
from spotrun.model.agent_protocol.command import BUDGET_EXCEEDED, MAX_RUNTIME_EXCEEDED, FailureCause

# Outcomes of a limit running out, and the error each reports: the job ends there, its checkpoint kept.
LIMIT_ERRORS = {"budget_exceeded": BUDGET_EXCEEDED, "timed_out": MAX_RUNTIME_EXCEEDED}


def save_failure(
    outcome: TrainOutcome,
    checkpoint_signal: signal.Signals,
    committed: CommittedCheckpoint | None,
    last_step: int | None,
    tail: str,
) -> str | None:
    """How the command ended when it died after the checkpoint signal without its last step committed.

    Parameters
    ----------
    outcome
        How supervision ended (an interruption or a limit: the checkpoint signal was due).
    checkpoint_signal
        The manifest's checkpoint signal.
    committed
        The newest committed checkpoint after the final sync.
    last_step
        The last step the script reported; None: none reported.
    tail
        The end of the command's log (masked).

    Returns
    -------
    str or None
        E.g. ``"exit code 1 after SIGTERM, step 45 not saved: RuntimeError: DataLoader worker ..."``; None when
        it exited as the contract asks (0, or 128 + the signal's number, as ``Run.exit_for_preemption`` does) or
        when its last step is committed whatever its exit (``torchrun`` exits 1 after forwarding the signal).
    """
    if outcome.exit_code in (0, 128 + int(checkpoint_signal)):
        return None
    if committed is not None and last_step is not None and committed.step >= last_step:
        return None
    lines = [
        line.strip() for line in tail.splitlines() if line.strip() and not line.startswith("--- spotrun:")
    ]
    lost = "" if last_step is None else f", step {last_step} not saved"
    text = f"{describe_exit(outcome.exit_code)} after {checkpoint_signal.name}{lost}"
    if lines:
        text += f": {lines[-1]}"
    return text[:500]


def stopped_with_checkpoint(
    error: str, outcome: TrainOutcome, cause: FailureCause, committed: CommittedCheckpoint | None
) -> StepReport:
    """The failure ``error`` of a command stopped with the checkpoint signal (a notice, a hang, idle GPUs), with
    the checkpoint committed last, from which the workflow resumes the job."""
    saved = f"checkpoint step {committed.step} committed" if committed else "no checkpoint committed"
    message = f"{outcome.message}; the command stopped ({describe_exit(outcome.exit_code)}); {saved}"
    update = {
        "message": message,
        "checkpoint": committed.prefix if committed else None,
        "checkpoint_step": committed.step if committed else None,
    }
    return StepReport.failed(error, cause.model_copy(update=update))


def stopped_at_limit(
    error: str, outcome: TrainOutcome, cause: FailureCause, committed: CommittedCheckpoint | None
) -> StepReport:
    """The failure ``error`` of a command stopped at a limit (budget, runtime): the job ends there, its checkpoint
    committed last named."""
    saved = f"checkpoint step {committed.step} committed" if committed else "no checkpoint committed"
    update = {
        "message": f"{outcome.message}; {saved}",
        "checkpoint": committed.prefix if committed else None,
        "checkpoint_step": committed.step if committed else None,
    }
    return StepReport.failed(error, cause.model_copy(update=update))

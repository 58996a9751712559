"""How much work a deadline job has: from ``training.expected_hours``, or learnt from its own progress reports.

Pure. A job gives its work either in hours (``training.expected_hours``) or in steps (``training.total_steps``,
the script's step count). In steps, the control plane learns how long a step takes from the steps the script
reported (the progress document the agent uploads, :func:`spotrun.model.layout.progress_key`) against the time
the job spent in ``TRAINING`` up to that report, over all its attempts: the time
:mod:`spotrun.model.deadline.stored_job` counts as work done. Time lost to preemptions (steps trained again after a
restore) counts in that time and not in the steps: the estimate errs long, the safe side for a deadline.

*Enough progress* to estimate (:data:`ESTIMATE_AFTER_HOURS`): at least one step, reported after at least ten
minutes of training. The first minutes of a run include its start-up (restoring the checkpoint, compiling,
warming the data loaders), which a rate over them would spread over the steps; ten minutes is a third of the
assumed checkpoint interval, so the estimate exists long before the first decision that depends on it much.
Until then the policy decides without it (:func:`decide_without_estimate`: on-demand when the deadline is near,
spot while it is far), in the control plane (:func:`spotrun.model.deadline.stored_job.decide_for_job`) and in the
simulator alike (:func:`spotrun.model.simulation.replay.replay_policy`, for a job whose work is in steps).
"""

from __future__ import annotations

from dataclasses import dataclass

from spotrun.model.deadline.state import Choice, Decision

# Ten minutes of training before a step rate is trusted (see the module's docstring), at AWS's time scale.
ESTIMATE_AFTER_HOURS = 10 / 60


@dataclass(frozen=True)
class StepsDone:
    """What the job reported: its latest step, and its training time up to that report.

    Attributes
    ----------
    steps:
        The latest step the script reported (it counts from the job's start: a restored run goes on from its
        checkpoint's step).
    training_hours:
        The job's time in ``TRAINING``, over all attempts, up to the report.
    """

    steps: int
    training_hours: float


@dataclass(frozen=True)
class WorkEstimate:
    """The job's work for the policy, in hours, and where the figure comes from.

    Attributes
    ----------
    work_hours:
        The whole job's work, without interruptions or saves.
    work_done_hours:
        The part of it done.
    source:
        ``"manifest"`` (``training.expected_hours``), or ``"progress: N steps in H h"``.
    """

    work_hours: float
    work_done_hours: float
    source: str

    @property
    def work_left_hours(self) -> float:
        """The work still to do."""
        return max(0.0, self.work_hours - self.work_done_hours)


def from_manifest(expected_hours: float, work_done_hours: float) -> WorkEstimate:
    """The work as the manifest gives it (``training.expected_hours``).

    Parameters
    ----------
    expected_hours
        ``training.expected_hours``.
    work_done_hours
        The work done so far, as the control plane counts it (training time at the policy's run rate).

    Returns
    -------
    WorkEstimate
        Its source is ``"manifest"``.
    """
    return WorkEstimate(work_hours=expected_hours, work_done_hours=work_done_hours, source="manifest")


def from_progress(
    total_steps: int,
    done: StepsDone | None,
    *,
    run_rate: float,
    estimate_after_hours: float = ESTIMATE_AFTER_HOURS,
) -> WorkEstimate | None:
    """The work learnt from the job's own progress, or None until there is enough of it.

    Parameters
    ----------
    total_steps
        ``training.total_steps``.
    done
        The latest step reported and the training time up to it; None before any report.
    run_rate
        The share of training time that advances the work (the rest is saves:
        :func:`spotrun.model.deadline.state.run_rate`), so that the hours are those ``expected_hours`` would give.
    estimate_after_hours
        The training time a rate needs (:data:`ESTIMATE_AFTER_HOURS`, scaled by the emulator's time scale).

    Returns
    -------
    WorkEstimate or None
        ``total_steps`` at the measured hours per step, the steps reported done at the same rate; None with no
        step reported, or before ``estimate_after_hours`` of training.
    """
    if done is None or done.steps < 1 or done.training_hours < estimate_after_hours:
        return None
    per_step = done.training_hours * run_rate / done.steps
    steps = min(done.steps, total_steps)
    return WorkEstimate(
        work_hours=total_steps * per_step,
        work_done_hours=steps * per_step,
        source=f"progress: {done.steps} steps in {done.training_hours:.2f} h",
    )


def decide_without_estimate(
    time_left_hours: float, deadline_hours: float, *, spot_available: bool, estimate_after_hours: float
) -> Decision:
    """The conservative choice while the work is not known (``training.total_steps`` before enough progress).

    Spot while the deadline is far: more than half of the time from submission to it is left (the first
    estimate needs ``estimate_after_hours`` of training, far less). On-demand when it is near, and whenever spot
    cannot be had: no waiting, since the slack a wait would spend is not known. By the half-way point a job
    whose work fills the other half can only make it on on-demand; it goes there without an estimate rather
    than bet on one.

    Parameters
    ----------
    time_left_hours, deadline_hours
        The time left before the deadline, and the deadline as hours after submission.
    spot_available
        Whether spot can be had now.
    estimate_after_hours
        The training an estimate needs (named in the reason).

    Returns
    -------
    Decision
        Its ``slack_hours`` is the time left: the slack is at most that, and not known.
    """
    unknown = (
        f"not checked until the job reports progress: no work estimate before {estimate_after_hours * 60:.1f} min "
        "of training"
    )
    if time_left_hours <= deadline_hours / 2:
        return Decision(
            Choice.ON_DEMAND, time_left_hours, f"{unknown}; the deadline is near: half its time gone"
        )
    if not spot_available:
        return Decision(
            Choice.ON_DEMAND, time_left_hours, f"{unknown}; spot is gone and a wait cannot be judged"
        )
    return Decision(Choice.SPOT, time_left_hours, f"{unknown}; the deadline is far: over half its time left")

"""The deadline policy's inputs about preemptions, from what the job has seen: one home for both callers.

Pure. The control plane (:func:`spotrun.model.deadline.stored_job.job_params`, from the job's attempts) and the
simulator (:func:`spotrun.model.simulation.replay.replay_policy`, from the replay so far) both build the policy's knobs
here, from the same :class:`SpotHistory`, so that they decide alike on a trace *with* preemptions too. Only what
the control plane can know goes in: the job's own spot time, its preemptions and which of them came without a
notice; never the pool's future.

- The pool's mean spot time between preemptions: the job's spot hours and preemptions, with the prior of
  :mod:`spotrun.model.job.interruption_rate` (one preemption in :data:`PRIOR_SPOT_HOURS`; the emulator scales it
  with its other durations).
- The share of preemptions that lose the unsaved work (:func:`~spotrun.model.checkpoint_interval.uncovered_fraction`):
  every one when a save outlasts the notice, else the silent share, estimated with the Beta prior of
  :mod:`spotrun.model.job.interruption_rate` (one interruption's worth, :data:`PRIOR_SILENT_FRACTION` silent), the
  estimate the agent's ``auto`` interval starts from.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotrun.model.checkpoint_interval import uncovered_fraction
from spotrun.model.deadline.state import PolicyParams, default_params
from spotrun.model.job.interruption_rate import PRIOR_SILENT_FRACTION, PRIOR_SPOT_HOURS


@dataclass(frozen=True)
class SpotHistory:
    """What the job has seen of spot so far.

    Attributes
    ----------
    spot_hours:
        Time on spot instances (boots included: the control plane counts an attempt from its launch).
    preemptions:
        Spot attempts that ended in an interruption.
    silent:
        Of those, the ones that came without a notice.
    """

    spot_hours: float = 0.0
    preemptions: int = 0
    silent: int = 0

    def spot_mtbf_hours(self, prior_spot_hours: float) -> float:
        """Mean spot hours between preemptions, with a Gamma prior worth one preemption in ``prior_spot_hours``.

        The prior is :mod:`spotrun.model.job.interruption_rate`'s (the agent's ``auto`` interval starts from it):
        without it, one preemption minutes into a job read as a pool preempted every few minutes, and the policy
        stopped returning to spot for the rest of the job (:func:`~spotrun.model.deadline.state.spot_stint_pays`).
        """
        return (prior_spot_hours + self.spot_hours) / (1 + self.preemptions)

    def silent_share(self) -> float:
        """The estimated share of preemptions without a notice (Beta prior worth one interruption)."""
        return (PRIOR_SILENT_FRACTION + self.silent) / (1 + self.preemptions)


def policy_params(
    history: SpotHistory,
    *,
    restart_hours: float,
    checkpoint_hours: float,
    checkpoint_interval_hours: float,
    tick_hours: float,
    notice_hours: float,
    prior_spot_hours: float = PRIOR_SPOT_HOURS,
    exposed_hours: float = float("inf"),
) -> PolicyParams:
    """The policy's knobs (:func:`~spotrun.model.deadline.state.default_params`) for a job with this spot history.

    Parameters
    ----------
    history:
        The job's spot time, preemptions and silent ones so far.
    restart_hours, checkpoint_hours, checkpoint_interval_hours:
        The job's changeover, save and interval.
    tick_hours:
        How stale a decision may be before the next one.
    notice_hours:
        The interruption notice (EC2's two minutes, scaled in the emulator): a save longer than it makes every
        preemption lose the unsaved work.
    prior_spot_hours:
        The rate's prior (:meth:`SpotHistory.spot_mtbf_hours`), scaled like the other durations in the emulator.
    exposed_hours:
        The time on spot since the attempt began (:func:`spotrun.model.deadline.state.exposed_hours`): what a
        preemption could take the work of; ``inf`` (a whole interval) when not known.

    Returns
    -------
    PolicyParams
    """
    share = uncovered_fraction(checkpoint_hours, notice_hours, history.silent_share())
    return default_params(
        restart_hours,
        checkpoint_hours,
        checkpoint_interval_hours,
        tick_hours,
        history.spot_mtbf_hours(prior_spot_hours),
        share,
        exposed_hours,
    )

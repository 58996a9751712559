"""A deadline job's return from on-demand to spot, once EC2 has spot for it: the ``deadline_return`` function.

The heartbeat that finds the return worth its trip asks for it on the deployment's bus
(:func:`spotrun.control.capacity.deadline_moves.redecide_while_training`); the move launches a spot standby,
which only a function allowed to launch instances may do. Apart from
:mod:`spotrun.control.capacity.deadline_moves`, so that the agents' API, which imports that module for every
training heartbeat, does not load the standby's launch.
"""

from __future__ import annotations

from datetime import datetime

from spotrun.control.capacity.deadline_moves import movable_attempt, move_attempt
from spotrun.control.capacity.standby import launch_standby
from spotrun.control.ports import Commands, Compute, DeploymentSettings, JobStore, Objects
from spotrun.model.deadline.state import Choice, Decision, Running
from spotrun.model.deadline.stored_job import ASSUMED, decide_for_job
from spotrun.model.job.bus_events import ReturnToSpot


def return_to_spot(
    request: ReturnToSpot,
    *,
    store: JobStore,
    compute: Compute,
    objects: Objects,
    commands: Commands,
    settings: DeploymentSettings,
    now: datetime,
) -> Decision | None:
    """Move a deadline job from on-demand back to spot, once a spot instance for it is had.

    Parameters
    ----------
    request
        The job and the on-demand attempt the heartbeat asked to move.
    store, compute, objects, commands
        Ports to the job store, EC2, S3 (the command document) and SSM.
    settings
        The deployment's :class:`spotrun.aws.settings.Settings` (subnets, launch template, time scale...).
    now
        When the request arrived.

    Returns
    -------
    Decision | None
        ``spot`` when the job is moved (the standby launched, the agent told); ``on-demand`` when the policy no
        longer pays for the trip or EC2 had no spot; None when the request is outlived (another attempt, a
        notice already given, the job no longer training).
    """
    job = store.get(request.job_id)
    attempt = None if job is None else movable_attempt(job)
    if (
        job is None
        or attempt is None
        or attempt.number != request.attempt
        or attempt.lifecycle != "on-demand"
    ):
        return None
    assumed = ASSUMED.scaled(settings.time_scale)
    decision = decide_for_job(job, now, running=Running.ON_DEMAND, spot_available=True, assumed=assumed)
    if decision.choice is not Choice.SPOT:
        return decision
    # A standby already there is this request's, launched by a delivery that stopped short of the move.
    standby = job.standby or launch_standby(
        job_id=job.job_id,
        store=store,
        compute=compute,
        subnet_ids=settings.subnet_ids,
        launch_template_name=settings.launch_template_name,
        now=now,
        assumed=assumed,
        lifecycle="spot",
    )
    if standby is None:
        return decide_for_job(job, now, running=Running.ON_DEMAND, spot_available=False, assumed=assumed)
    move_attempt(
        job, attempt, decision, store=store, objects=objects, commands=commands, settings=settings, now=now
    )
    return decision

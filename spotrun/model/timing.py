"""The workflow's timing, derived from one time-scale factor.

Step Functions holds waits and heartbeats in the execution input (``SecondsPath``, ``HeartbeatSecondsPath``)
rather than as literals, so the emulator can shrink them all by one factor while AWS keeps the real values.
Training itself is never scaled: the user's script runs in real time everywhere.
"""

from __future__ import annotations

from spotrun.model.base import DeferredModel
from spotrun.model.manifest.schema import JobManifest


class WorkflowTiming(DeferredModel):
    """Seconds the workflow and the agent work by. Values the ASL reads are whole seconds (AWS requires it)."""

    boot_poll_seconds: int
    boot_timeout_seconds: float
    # The readiness check looks again every ready_recheck_seconds for up to ready_hold_seconds before it answers
    # "not yet". The workflow's Wait between checks alone would add half a poll on average (7.5 s on AWS) between
    # the instance becoming reachable and its first command. 0: one look per check.
    ready_hold_seconds: float = 0.0
    ready_recheck_seconds: float = 1.0
    capacity_retry_seconds: int
    # capacity.max_wait_minutes (or its default), scaled: how long the job may wait for capacity, over all waits.
    capacity_patience_seconds: float
    heartbeat_seconds: int  # the workflow gives up on a silent agent after this long
    agent_heartbeat_seconds: float  # how often the agent reports it is alive
    agent_poll_seconds: float  # how often the agent polls IMDS and the checkpoint directory
    stage_timeout_seconds: int
    train_timeout_seconds: int
    # How long before the budget runs out the train step stops, to save, upload and commit its checkpoint and
    # release the instance; and how much of it the command gets to save and exit after the checkpoint signal.
    budget_margin_seconds: float = 120.0
    limit_grace_seconds: float = 60.0
    # How long a running instance may take for its SSM agent to register before it counts as unmanageable.
    ssm_registration_timeout_seconds: float = 600.0
    # A multi-node group that lost a node waits this long for its replacement in the same zone, then moves.
    replace_node_seconds: float = 600.0
    # How often each node's agent puts the telemetry gathered since its last put (training metrics, GPU samples)
    # as the next part in the jobs bucket: a PUT per node each time (30 s on AWS: 2,880 requests a day a node).
    telemetry_seconds: float = 30.0
    # The emulator's factor (1.0 on AWS): what the deadline policy scales its assumed AWS durations by
    # (and training.gpu_idle's minutes, for the agent's idle watch).
    time_scale: float = 1.0


def workflow_timing(manifest: JobManifest, time_scale: float) -> WorkflowTiming:
    """Timing for one job.

    Parameters
    ----------
    manifest
        The job (its maximum runtime bounds the training step, its setup time limit the staging step).
    time_scale
        1.0 on AWS; the emulator's factor (e.g. 0.02) locally.

    Returns
    -------
    WorkflowTiming
        The values put in the execution input and in each agent command.
    """
    # A fresh agent process (interpreter start and imports) is not scaled: on a loaded 2-core machine, with three
    # jobs replacing instances at once, one took over 6 s to send its first heartbeat. The emulator's window is
    # therefore at least 12 s, or a slow start would count as a hung instance.
    heartbeat = max(12, round(300 * time_scale))
    # The margin is what a spot warning leaves (two minutes), scaled like it; at least 10 s in the emulator,
    # where the upload and the release, which are not scaled, run on a loaded laptop.
    budget_margin = 120.0 if time_scale >= 1 else max(10.0, 120.0 * time_scale)
    boot_poll = max(1, round(15 * time_scale))
    return WorkflowTiming(
        time_scale=time_scale,
        boot_poll_seconds=boot_poll,
        # Three polls' worth inside one check (45 s on AWS, within instance_ready's 60 s timeout), looking every
        # 2 s: the check covers three quarters of the boot at a fine grain, at the cost of a few cheap describe
        # calls. In the emulator no finer than 0.25 s: each look is three calls to moto on the same cores, and
        # eight jobs may boot at once.
        ready_hold_seconds=3.0 * boot_poll,
        ready_recheck_seconds=max(0.25, 2 * time_scale),
        boot_timeout_seconds=900 * time_scale,
        ssm_registration_timeout_seconds=600 * time_scale,
        capacity_retry_seconds=max(1, round(60 * time_scale)),
        capacity_patience_seconds=manifest.capacity.max_wait_seconds * time_scale,
        replace_node_seconds=manifest.capacity.replace_node_minutes * 60.0 * time_scale,
        heartbeat_seconds=heartbeat,
        # Five heartbeats per timeout window: one lost call does not fail the step.
        agent_heartbeat_seconds=heartbeat / 5,
        agent_poll_seconds=max(0.2, 5 * time_scale),
        # Copying (4 h is far past any input this copies) and then training.setup, which the agent bounds itself;
        # the workflow's limit stays a backstop behind both.
        stage_timeout_seconds=4 * 3600 + manifest.training.setup_timeout_minutes * 60,
        # The agent enforces max_runtime itself (what is left of it over all attempts, in real seconds); the
        # workflow's limit is a backstop for one attempt, with a margin for uploads. A backstop that fires is
        # taken as a lost instance, and acquire then refuses a new attempt once the allowance is used up.
        train_timeout_seconds=manifest.training.max_runtime_minutes * 60 + 1800,
        # No finer than 1 s in the emulator: each put is a request to moto on the same cores as every agent.
        telemetry_seconds=30.0 if time_scale >= 1 else max(1.0, 30.0 * time_scale),
        budget_margin_seconds=budget_margin,
        limit_grace_seconds=budget_margin * 0.6,
    )

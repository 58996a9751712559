"""The ``train`` step: run the user's command under the checkpoint contract and report how it ended."""

from __future__ import annotations

import contextlib
import logging
import signal
from datetime import UTC, datetime
from pathlib import Path

from spotrun.agent.checkpoint_store import CommittedCheckpoint, latest_committed
from spotrun.agent.periodic import Ticker
from spotrun.agent.secrets import Masker, SecretsUnavailableError, resolve_secrets
from spotrun.agent.step_context import StepContext, StepReport
from spotrun.agent.steps.final_outputs import (
    ModelMissingError,
    OutputLinkError,
    locate_model,
    log_tail,
    upload_log,
    upload_outputs,
    write_output_list,
)
from spotrun.agent.steps.train_outcome import (
    LIMIT_ERRORS,
    save_failure,
    stopped_at_limit,
    stopped_with_checkpoint,
)
from spotrun.agent.supervision.checkpoint_sync import CheckpointSyncer
from spotrun.agent.supervision.command_environment import child_environment, install_runtime
from spotrun.agent.supervision.hang import HangWatch
from spotrun.agent.supervision.idle import IdleWatch
from spotrun.agent.supervision.interval import IntervalAdvisor
from spotrun.agent.supervision.log_shipper import live_log
from spotrun.agent.supervision.notice_relay import NoticeChannel
from spotrun.agent.supervision.progress import ProgressPublisher
from spotrun.agent.supervision.spot_notices import Notice
from spotrun.agent.supervision.supervisor import TrainingSupervisor, TrainOutcome
from spotrun.agent.supervision.telemetry import TelemetryShipper, metrics_file, node_telemetry
from spotrun.model import layout
from spotrun.model.agent_protocol.command import (
    SECRETS_UNAVAILABLE,
    SPOT_INTERRUPTED,
    TRAINING_FAILED,
    TRAINING_HUNG,
    TRAINING_IDLE,
    AgentCommand,
    FailureCause,
    NodeDone,
    TrainResult,
)
from spotrun.model.contract_variables import expand_argv
from spotrun.model.job.interruption_rate import prior_rate
from spotrun.model.job.telemetry import GpuLine

logger = logging.getLogger(__name__)

# After a group's command ended, how many polls the final sync waits for the other nodes' parts of its last
# checkpoint before the step reports (spotrun.agent.supervision.checkpoint_sync.CheckpointSyncer.await_group).
GROUP_COMMIT_WAIT_POLLS = 6


def max_runtime_seconds(command: AgentCommand) -> float:
    """The time limit of the step: what the control plane left of the job's allowance, else all of it."""
    if command.max_runtime_seconds is not None:
        return command.max_runtime_seconds
    return command.manifest.training.max_runtime_minutes * 60.0


def budget_seconds(command: AgentCommand, now: datetime | None = None) -> float | None:
    """Seconds from ``now`` until the command's ``stop_at`` (at least 0), or None when the job has no budget."""
    if command.stop_at is None:
        return None
    now = now or datetime.now(UTC)
    return max(0.0, (command.stop_at - now).total_seconds())


def run_train(command: AgentCommand, ctx: StepContext) -> StepReport:
    """Run the training command until it succeeds, fails, runs out of time or is interrupted.

    Checkpoints and the step reached are uploaded every ``command.poll_seconds`` while it runs, and once more
    when it ends; the script's metrics and the GPU samples go to the job's telemetry every
    ``command.telemetry_seconds`` and once more when it ends (:mod:`spotrun.agent.supervision.telemetry`). The
    interruption notice comes from ``ctx.watcher`` (IMDS, the agent's own SIGTERM, or a ``notice`` command
    through :class:`~spotrun.agent.supervision.notice_relay.NoticeChannel`): the command then gets the
    manifest's checkpoint signal, and its last checkpoint is committed before ``Spot.Interrupted`` is reported.
    With ``command.hang_seconds``, a command whose reported step stops advancing that long is stopped alike and
    the step reports ``Training.Hung``; with ``command.gpu_idle``, one whose GPUs all idle that long is stopped
    alike and the step reports ``Training.Idle`` (:mod:`spotrun.agent.supervision.idle`).

    A node of a multi-node job (``command.group``) runs ``torchrun`` with its group's environment, uploads its
    part of each checkpoint (committed once every node's is up) and, other than node 0, reports
    :class:`NodeDone` on success: node 0 hosts global rank 0, which writes the model it uploads.

    Parameters
    ----------
    command
        A ``train`` command.
    ctx
        The step's ports.

    Returns
    -------
    StepReport
        TrainResult (NodeDone from a group's node > 0) on success; ``Secrets.Unavailable`` (a reference of
        ``training.secrets`` cannot be read), ``Training.Failed``, ``Spot.Interrupted``, ``Training.Hung``,
        ``Training.Idle``, ``Budget.Exceeded`` (``stop_at`` passed) or ``Training.MaxRuntimeExceeded``; nothing
        when abandoned.
    """
    manifest = command.manifest
    # Read afresh by each step's process: the values are never written to the instance's disk.
    try:
        secret_values = resolve_secrets(manifest.training.secrets, ctx.secret_reader)
    except SecretsUnavailableError as exc:
        return StepReport.failed(SECRETS_UNAVAILABLE, FailureCause(message=str(exc)))
    ctx.masker = Masker(secret_values.values())
    job_layout = layout.NvmeLayout(ctx.nvme_root, command.job_id)
    job_layout.create()
    install_runtime(job_layout.runtime_dir)
    log_path = job_layout.log_file(command.attempt)
    group = command.group
    progress_path = job_layout.progress_file(command.attempt)
    progress_path.unlink(missing_ok=True)  # left by an earlier run of this step: not this run's progress
    hang = _hang_watch(command, progress_path)  # after the unlink: an earlier run's step is not this run's
    metrics_path = metrics_file(job_layout.runtime_dir, command.attempt)
    metrics_path.unlink(missing_ok=True)  # an earlier run of this step shipped its lines already
    idle = None if command.gpu_idle is None else IdleWatch(command.gpu_idle, group.node if group else 0)
    progress = ProgressPublisher(ctx.s3, command.jobs_bucket, command.job_id, command.attempt, progress_path)
    syncer = CheckpointSyncer(
        ctx.s3,
        command.jobs_bucket,
        command.job_id,
        command.attempt,
        job_layout.checkpoint_dir,
        manifest.training.checkpoint.keep_last,
        committed=_already_committed(ctx, command),
        node=group.node if group else 0,
        nodes=group.nodes if group else 1,
    )
    environment = command_environment(command, ctx, job_layout, secret_values, ctx.gpus_per_node())
    supervisor = TrainingSupervisor(
        # No shell runs the command: its ${NAME}s (checked against the contract at validation) are expanded here.
        expand_argv(manifest.training.command, environment),
        job_layout.code_dir,
        environment,
        log_path,
        # A group's command restarts under torch elastic (PET_MAX_RESTARTS): one restart policy, not two.
        restarts=0 if group is not None else manifest.training.restarts_on_error,
        max_runtime_seconds=max_runtime_seconds(command),
        checkpoint_signal=signal.Signals[manifest.training.checkpoint.signal],
        interruption=ctx.watcher.interruption,
        abandoned=ctx.abandoned.is_set,
        tick_seconds=min(0.2, command.poll_seconds),
        budget_seconds=budget_seconds(command),
        stop_grace_seconds=command.stop_grace_seconds,
        hang=hang,
        idle=idle,
        # The log shows the command as written: an expanded training.env value may be a secret.
        shown_argv=manifest.training.command,
    )
    sync_ticker = Ticker(command.poll_seconds, syncer.sync_quietly, "checkpoint-sync", immediately=False)
    advisor = _interval_advisor(command, job_layout)

    def poll_progress() -> None:
        progress.publish_quietly()
        if advisor is not None:
            # A new save time may move the interval; an upload that no longer fits the notice too.
            advisor.update_quietly(progress.save_seconds, syncer.upload_seconds)
            ctx.checkpoint_interval = advisor.current  # the heartbeats carry it to the job's record

    if advisor is not None:
        poll_progress()  # the interval file holds the first interval before the command starts
    progress_ticker = Ticker(command.poll_seconds, poll_progress, "progress", immediately=False)
    channel = NoticeChannel(
        job_layout.supervisor_pid_file(command.attempt), ctx.watcher, command.job_id, command.attempt
    )

    def on_rebalance(notice: Notice) -> None:
        sync_ticker.trigger()  # interruption risk is up: get the newest checkpoint out now

    ctx.watcher.on_rebalance = on_rebalance
    logger.info("training job %s attempt %d: %s", command.job_id, command.attempt, manifest.training.command)
    shipper = live_log(
        ctx.logs, command.jobs_bucket, command.job_id, command.attempt, log_path, mask=ctx.masker.mask
    )
    with channel:
        with (
            shipper,
            sync_ticker,
            progress_ticker,
            ctx.watcher,
            _telemetry(command, ctx, metrics_path, hang, idle) as telemetry,
        ):
            outcome = supervisor.run()
        logger.info("training ended: %s (%s)", outcome.kind, outcome.message)
        # Whatever the outcome, the newest local checkpoint is worth committing: the next attempt resumes it.
        syncer.sync_quietly()
        if group is not None:
            syncer.await_group(GROUP_COMMIT_WAIT_POLLS * command.poll_seconds, command.poll_seconds)
        telemetry.ship_quietly()  # the last part, after the checkpoint: on a notice that comes first
        poll_progress()
        log_key = upload_log(
            ctx.s3, command.jobs_bucket, command.job_id, command.attempt, log_path, ctx.masker
        )
    if outcome.kind == "abandoned":
        return StepReport()
    if outcome.kind == "completed" and group is not None and group.node > 0:
        # Node 0 hosts global rank 0, which writes the model: only its agent uploads outputs and reports them.
        return StepReport.succeeded(NodeDone(node=group.node, seconds=round(outcome.seconds, 3)))
    if outcome.kind == "completed":
        return _completed(
            command, ctx, outcome, syncer.last_committed, progress.last_step, log_key, job_layout
        )
    tail = log_tail(log_path, masker=ctx.masker)
    cause = FailureCause(
        message=outcome.message,
        exit_code=outcome.exit_code,
        log_tail=tail,
        log_key=log_key,
        last_step=progress.last_step,
    )
    if outcome.kind in ("interrupted", "hung", "idle", *LIMIT_ERRORS):
        failed = save_failure(
            outcome, supervisor.checkpoint_signal, syncer.last_committed, progress.last_step, tail
        )
        cause = cause.model_copy(update={"save_failed": failed})
    if outcome.kind == "interrupted":
        return stopped_with_checkpoint(SPOT_INTERRUPTED, outcome, cause, syncer.last_committed)
    if outcome.kind == "hung":
        # Routed like an interruption: the group restarts from its last committed checkpoint.
        return stopped_with_checkpoint(TRAINING_HUNG, outcome, cause, syncer.last_committed)
    if outcome.kind == "idle" and idle is not None and idle.verdict is not None:
        # With its checkpoint, as an interruption: gpu_idle.action relaunch resumes from it.
        stopped = stopped_with_checkpoint(TRAINING_IDLE, outcome, cause, syncer.last_committed).cause
        return StepReport.failed(TRAINING_IDLE, idle.verdict.cause(stopped or cause))
    if outcome.kind in LIMIT_ERRORS:
        return stopped_at_limit(LIMIT_ERRORS[outcome.kind], outcome, cause, syncer.last_committed)
    return StepReport.failed(TRAINING_FAILED, cause)


def command_environment(
    command: AgentCommand,
    ctx: StepContext,
    job_layout: layout.NvmeLayout,
    secrets: dict[str, str],
    gpus_per_node: int = 0,
) -> dict[str, str]:
    """The environment of the training command (and of ``training.setup``'s), with what a group's node reads
    from IMDS: its own address (node 0's is the rendezvous host) and, with an EFA, its instance type."""
    group = command.group
    return child_environment(
        command,
        job_layout,
        ctx.base_env,
        gpus_per_node,
        secrets=secrets,
        local_addr=ctx.local_ipv4() if group is not None and group.node > 0 else None,
        instance_type=ctx.instance_type() if group is not None and group.efa else None,
    )


def _telemetry(
    command: AgentCommand,
    ctx: StepContext,
    metrics_path: Path,
    hang: HangWatch | None,
    idle: IdleWatch | None,
) -> contextlib.AbstractContextManager[TelemetryShipper]:
    def latest(line: GpuLine) -> None:
        ctx.gpu = line  # the heartbeats carry it

    return node_telemetry(
        command,
        ctx.s3,
        metrics_path,
        metrics=ctx.metrics,
        instance_id=ctx.instance_id,
        latest=latest,
        hang=hang,
        idle=idle,
    )


def _interval_advisor(command: AgentCommand, job_layout: layout.NvmeLayout) -> IntervalAdvisor | None:
    """The advisor of ``interval_steps: auto`` (None for a step-based interval), its file fresh for the attempt."""
    checkpoint = command.manifest.training.checkpoint
    if not checkpoint.auto:
        return None
    if command.group is not None and command.group.node > 0:
        return None  # rank 0, on node 0, decides when the group saves (TorchCheckpointer.step_done)
    path = job_layout.checkpoint_interval_file(command.attempt)
    path.unlink(missing_ok=True)  # an earlier run's interval: this run measures its own
    return IntervalAdvisor(path, command.pool_rate or prior_rate(), checkpoint.max_interval_hours)


def _hang_watch(command: AgentCommand, progress_path: Path) -> HangWatch | None:
    """The watch of ``command.hang_seconds`` over the script's reported steps; None without a bound."""
    if command.hang_seconds is None:
        return None
    # The message names the bound as the manifest does (unscaled, its default included), not the scaled seconds.
    bound = command.manifest.hang_seconds
    limit = None if bound is None else f"training.hang_minutes {bound / 60:g}"
    return HangWatch(command.hang_seconds, progress_path, limit=limit)


def _already_committed(ctx: StepContext, command: AgentCommand) -> CommittedCheckpoint | None:
    try:
        return latest_committed(ctx.s3, command.jobs_bucket, command.job_id)
    except Exception as exc:  # not knowing only costs one redundant upload
        logger.warning("could not list committed checkpoints: %s", exc)
        return None


def _completed(
    command: AgentCommand,
    ctx: StepContext,
    outcome: TrainOutcome,
    committed: CommittedCheckpoint | None,
    last_step: int | None,
    log_key: str | None,
    job_layout: layout.NvmeLayout,
) -> StepReport:
    try:
        outputs = upload_outputs(
            ctx.s3, command.jobs_bucket, command.job_id, job_layout.output_dir, workers=ctx.workers
        )
        model = locate_model(command.job_id, command.manifest.outputs.model, outputs)
    except (ModelMissingError, OutputLinkError) as exc:
        cause = FailureCause(
            message=str(exc),
            exit_code=0,
            log_tail=log_tail(job_layout.log_file(command.attempt), masker=ctx.masker),
            log_key=log_key,
            last_step=last_step,
        )
        return StepReport.failed(TRAINING_FAILED, cause)
    result = TrainResult(
        exit_code=0,
        seconds=round(outcome.seconds, 3),
        last_checkpoint_step=committed.step if committed else None,
        last_step=last_step,
        outputs=write_output_list(ctx.s3, command.jobs_bucket, command.job_id, command.attempt, outputs),
        model_key=model.key,
        model_sha256=model.sha256,
        log_key=log_key or layout.log_key(command.job_id, command.attempt),
    )
    return StepReport.succeeded(result)

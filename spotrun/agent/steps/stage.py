"""The ``stage`` step: copy the job's inputs, code and latest committed checkpoint onto the NVMe, then run setup."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

from spotrun.agent.checkpoint_store import (
    CommittedCheckpoint,
    RestoredCheckpoint,
    download_checkpoint,
    file_sha256,
    latest_committed,
    local_files,
    read_marker,
)
from spotrun.agent.links import LinkError, real_directories
from spotrun.agent.secrets import Masker, SecretsUnavailableError, resolve_secrets
from spotrun.agent.step_context import StepContext, StepReport
from spotrun.agent.steps.code_archive import plan_code, unpack_code
from spotrun.agent.steps.final_outputs import log_tail, upload_log
from spotrun.agent.steps.setup import SetupAbandonedError, SetupFailedError, SetupOverBudgetError, run_setup
from spotrun.agent.steps.train import budget_seconds, command_environment
from spotrun.agent.supervision.command_environment import install_runtime
from spotrun.agent.supervision.log_shipper import live_log
from spotrun.agent.transfer.download import StageItem, StagingError, plan_input, stage
from spotrun.model import layout
from spotrun.model.agent_protocol.command import (
    BUDGET_EXCEEDED,
    SECRETS_UNAVAILABLE,
    SETUP_FAILED,
    AgentCommand,
    FailureCause,
    NodeDone,
    StageResult,
)

logger = logging.getLogger(__name__)


def plan_job_inputs(
    command: AgentCommand, ctx: StepContext, job_layout: layout.NvmeLayout
) -> list[StageItem]:
    """List every file of the manifest's ``data.inputs`` and ``training.code``.

    Parameters
    ----------
    command
        The stage command.
    ctx
        The step's ports.
    job_layout
        The job's NVMe directories (created).

    Returns
    -------
    list[StageItem]
        Data inputs under ``data_dir/<destination>``, code under ``code_dir`` (or its archive beside it).
    """
    manifest = command.manifest
    items: list[StageItem] = []
    for data_input in manifest.data.inputs:
        destination = job_layout.data_dir / data_input.destination
        if data_input.destination.endswith("/"):
            # "dir/" receives a single object under its own name; made without passing through a link.
            try:
                real_directories(job_layout.data_dir, destination)
            except LinkError as exc:
                raise StagingError(f"data.inputs destination {data_input.destination!r}: {exc}") from None
        items.extend(plan_input(ctx.s3, data_input.source, destination))
    if manifest.training.code is not None:
        items.extend(plan_code(ctx.s3, manifest.training.code, job_layout))
    return items


def restore_checkpoint(
    command: AgentCommand, ctx: StepContext, job_layout: layout.NvmeLayout
) -> RestoredCheckpoint | None:
    """Put the job's latest committed checkpoint into the checkpoint directory, unless it is already there.

    A job with none of its own, whose manifest names ``training.resume_from``, starts from that job's.

    Returns
    -------
    RestoredCheckpoint or None
        What was restored (``files == 0`` when a local copy already held that step), or None without one.

    Raises
    ------
    StagingError
        When ``training.resume_from`` names a job without a committed checkpoint.
    """
    source_job = command.job_id
    latest = latest_committed(ctx.s3, command.jobs_bucket, command.job_id)
    resume_from = command.manifest.training.resume_from
    if latest is None and resume_from is not None:
        latest = latest_committed(ctx.s3, command.jobs_bucket, resume_from)
        if latest is None:
            raise StagingError(
                f"training.resume_from: job {resume_from!r} has no committed checkpoint in "
                f"s3://{command.jobs_bucket}/{layout.checkpoints_prefix(resume_from)}"
            )
        source_job = resume_from
    if command.group is not None:
        return _restore_group(command, ctx, job_layout, source_job, latest)
    if latest is None:
        return None
    local = layout.local_checkpoints(job_layout.checkpoint_dir)
    # This instance may already hold it (a second stage of the same attempt): nothing to copy then.
    held = local[-1][1] if local and local[-1][0] >= latest.step and not local[-1][1].is_symlink() else None
    return _held_or_download(command, ctx, job_layout, source_job, latest, held)


def _restore_group(
    command: AgentCommand,
    ctx: StepContext,
    job_layout: layout.NvmeLayout,
    source_job: str,
    latest: CommittedCheckpoint | None,
) -> RestoredCheckpoint | None:
    """Restore a group's committed checkpoint whole onto this node, and leave no other local checkpoint.

    A node kept from the group's last attempt holds its own parts of steps never committed (another node's part
    never came) and, of the committed step, perhaps only its own part: the script would resume either as if it
    were complete. So the local directory keeps only the committed checkpoint, and only when it holds every file
    the commit marker lists, with the listed bytes.
    """
    for step, path in layout.local_checkpoints(job_layout.checkpoint_dir):
        if (
            latest is None
            or step != latest.step
            or not _holds_marker_files(ctx, command, source_job, latest, path)
        ):
            _remove(path)
            logger.info("removed local checkpoint step %d: not the group's committed checkpoint", step)
    if latest is None:
        return None
    held = dict(layout.local_checkpoints(job_layout.checkpoint_dir)).get(latest.step)
    return _held_or_download(command, ctx, job_layout, source_job, latest, held)


def _held_or_download(
    command: AgentCommand,
    ctx: StepContext,
    job_layout: layout.NvmeLayout,
    source_job: str,
    latest: CommittedCheckpoint,
    held: Path | None,
) -> RestoredCheckpoint:
    """The checkpoint ``held`` on this instance's disk as it is (nothing copied), or else downloaded there."""
    if held is not None:
        return RestoredCheckpoint(step=latest.step, prefix=latest.prefix, path=held, files=0, bytes=0)
    return download_checkpoint(
        ctx.s3,
        command.jobs_bucket,
        source_job,
        latest.step,
        job_layout.checkpoint_dir,
        max_workers=ctx.workers,
        direct=ctx.direct,
    )


def _holds_marker_files(
    ctx: StepContext, command: AgentCommand, source_job: str, latest: CommittedCheckpoint, path: Path
) -> bool:
    marker = read_marker(ctx.s3, command.jobs_bucket, source_job, latest.step)
    try:
        if path.is_symlink() or {relative for relative, _ in local_files(path)} != {
            f.path for f in marker.files
        }:
            return False
        return all(file_sha256(path / entry.path) == entry.sha256 for entry in marker.files)
    except (LinkError, OSError):
        return False


def _remove(path: Path) -> None:
    if path.is_symlink():
        path.unlink()  # a link left in the checkpoint directory: removed, never followed
    else:
        shutil.rmtree(path)


def run_stage(command: AgentCommand, ctx: StepContext) -> StepReport:
    """Stage inputs and code, verified, restore the latest committed checkpoint, then run ``training.setup``.

    Parameters
    ----------
    command
        A ``stage`` command.
    ctx
        The step's ports.

    Returns
    -------
    StepReport
        A :class:`StageResult` (:class:`NodeDone` from a group's node > 0); ``Secrets.Unavailable`` when a
        reference of ``training.secrets`` cannot be read; ``Setup.Failed`` when a setup command failed; nothing
        when the workflow stopped waiting during setup. Staging failures raise, and the runner reports them as
        ``Staging.Failed``.
    """
    started = time.monotonic()
    # First: a reference that cannot be read ends the job before any input is copied.
    try:
        secret_values = resolve_secrets(command.manifest.training.secrets, ctx.secret_reader)
    except SecretsUnavailableError as exc:
        return StepReport.failed(SECRETS_UNAVAILABLE, FailureCause(message=str(exc)))
    ctx.masker = Masker(secret_values.values())
    job_layout = layout.NvmeLayout(ctx.nvme_root, command.job_id)
    job_layout.create()
    items = plan_job_inputs(command, ctx, job_layout)
    logger.info("staging %d files for job %s", len(items), command.job_id)
    report = stage(ctx.s3, items, root=job_layout.root, max_workers=ctx.workers, direct=ctx.direct)
    if command.manifest.training.code is not None:
        unpack_code(command.manifest.training.code, job_layout)
    restored = restore_checkpoint(command, ctx, job_layout)
    if restored is not None:
        logger.info("restored checkpoint step %d (%d files)", restored.step, restored.files)
    result = StageResult(
        files=report.files + (restored.files if restored else 0),
        bytes=report.bytes + (restored.bytes if restored else 0),
        seconds=round(time.monotonic() - started, 3),
        checkpoint_restored=restored.prefix if restored else None,
        restored_step=restored.step if restored else None,
    )
    if not command.manifest.training.setup:
        return _node_report(command, StepReport.succeeded(result))
    return _node_report(command, _set_up(command, ctx, job_layout, result, secret_values))


def _node_report(command: AgentCommand, report: StepReport) -> StepReport:
    """A group's node other than node 0 reports its success as :class:`NodeDone` (node 0 the StageResult)."""
    group = command.group
    if group is None or group.node == 0 or not isinstance(report.output, StageResult):
        return report
    seconds = report.output.seconds + (report.output.setup_seconds or 0.0)
    return StepReport.succeeded(NodeDone(node=group.node, seconds=round(seconds, 3)))


def _set_up(
    command: AgentCommand,
    ctx: StepContext,
    job_layout: layout.NvmeLayout,
    result: StageResult,
    secret_values: dict[str, str],
) -> StepReport:
    """Run the setup commands with the training command's environment; upload the log whatever happens."""
    training = command.manifest.training
    log_path = job_layout.log_file(command.attempt)
    # Setup may run `python -c "from spotrun import training"` as the command would: the same runtime, the same env.
    install_runtime(job_layout.runtime_dir)
    logger.info("running %d setup command(s) for job %s", len(training.setup), command.job_id)
    shipper = live_log(
        ctx.logs, command.jobs_bucket, command.job_id, command.attempt, log_path, mask=ctx.masker.mask
    )
    try:
        with shipper:  # setup's lines open the attempt's live log; the train step's follow them
            seconds = run_setup(
                training.setup,
                job_layout.code_dir,
                command_environment(command, ctx, job_layout, secret_values),
                log_path,
                timeout_seconds=training.setup_timeout_minutes * 60.0,
                budget_seconds=budget_seconds(command),
                abandoned=ctx.abandoned.is_set,
            )
    except SetupAbandonedError:
        upload_log(ctx.s3, command.jobs_bucket, command.job_id, command.attempt, log_path, ctx.masker)
        return StepReport()
    except SetupFailedError as exc:
        logger.warning("setup failed: %s", exc.failure.message)
        log_key = upload_log(
            ctx.s3, command.jobs_bucket, command.job_id, command.attempt, log_path, ctx.masker
        )
        cause = FailureCause(
            message=exc.failure.message,
            exit_code=exc.failure.exit_code,
            log_tail=log_tail(log_path, masker=ctx.masker),
            log_key=log_key,
        )
        error = BUDGET_EXCEEDED if isinstance(exc, SetupOverBudgetError) else SETUP_FAILED
        return StepReport.failed(error, cause)
    logger.info("setup done in %.1f s", seconds)
    # Now, not only when training ends: `spotrun logs` shows what setup did while the job trains.
    upload_log(ctx.s3, command.jobs_bucket, command.job_id, command.attempt, log_path, ctx.masker)
    return StepReport.succeeded(result.model_copy(update={"setup_seconds": seconds}))

"""``spotrun demo``: the example job in the embedded runtime, shown live, with planned spot interruptions."""

from __future__ import annotations

import shutil
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from spotrun.cli.summary import final_summary, status_text
from spotrun.local.chaos_plan import Hit, InterruptionSchedule, plan_interruptions
from spotrun.local.demo import (
    EXAMPLE_DIR,
    drop_manifest,
    example_steps,
    job_progress,
    local_runtime,
    upload_example,
    wait_for_job,
)
from spotrun.local.injector import Injector, Progress
from spotrun.model.job import Job, utc_now
from spotrun.model.manifest_io import parse_manifest_text


def plan_for_example(manifest: bytes, interruptions: int, seed: int) -> list[int]:
    """Steps at which to interrupt the example's training (see :func:`spotrun.local.chaos_plan.plan_interruptions`).

    Raises
    ------
    ValueError
        When that many interruptions do not fit in the example's run.
    """
    # Planned in the first 60 % of the run: a warning takes effect some steps after it is decided, and one
    # landing after the last step would change nothing.
    return plan_interruptions(interruptions, example_steps(manifest) * 3 // 5, seed, margin=0.15)


def run_demo(console: Console, workdir: Path, interruptions: int, seed: int) -> Job:
    """Run the example job end to end, interrupting it at ``interruptions`` random steps; return its record.

    Parameters
    ----------
    console
        Where the live view and the summary go.
    workdir
        The emulator's files (instances, logs); emptied first.
    interruptions
        How many spot interruptions to inject, each into a new attempt; 0 for none.
    seed
        Seed of the steps chosen.

    Returns
    -------
    Job
        The job's final record.

    Raises
    ------
    ValueError
        When the interruptions do not fit in the example's run.
    """
    manifest = (EXAMPLE_DIR / "manifest.yaml").read_bytes()
    planned = plan_for_example(manifest, interruptions, seed)
    tolerated = parse_manifest_text(manifest).capacity.max_interruptions
    shutil.rmtree(workdir, ignore_errors=True)
    log_file = workdir / "control-plane.log"
    # The runtime stops (its threads, its last handler calls) before the log file closes, and the summary is
    # printed only then, so nothing can follow it.
    with local_runtime(workdir, log_file=log_file) as runtime:
        console.print(
            f"[bold]spotrun demo[/bold]: AWS emulator on {runtime.endpoint_url}, time scale {runtime.time_scale}"
        )
        if planned:
            steps = ", ".join(map(str, planned))
            console.print(
                f"spot interruptions planned at step{'s' if len(planned) > 1 else ''} {steps} (seed {seed})"
            )
        if interruptions > tolerated:
            console.print(
                f"[yellow]the manifest tolerates {tolerated} interruptions: the job will fail[/yellow]"
            )
        upload_example(runtime)
        submitted = drop_manifest(runtime, manifest, "tiny-regression.yaml")
        console.print(
            f"manifest dropped at s3://{runtime.settings.jobs_bucket}/{submitted.key} -> job {submitted.job_id}"
        )

        spinner = Spinner("dots", text="waiting for the S3 event to start the workflow")
        live_view = Live(
            spinner,
            console=console,
            refresh_per_second=10,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        printed = 0
        state = Text("")
        step = ""

        def refresh() -> None:
            spinner.update(text=Text.assemble(state, step))

        def show(job: Job) -> None:
            nonlocal printed, state
            for change in job.timeline[printed:]:
                live.console.print(
                    Text.assemble("  ", status_text(change.status), f"  {change.detail or ''}")
                )
            printed = len(job.timeline)
            attempt = job.current_attempt
            where = f" on {attempt.instance_type} in {attempt.availability_zone}" if attempt else ""
            state = Text.assemble(status_text(job.status), where)
            refresh()

        def on_progress(progress: Progress) -> None:
            nonlocal step
            step = "" if progress.step is None else f", attempt {progress.attempt} at step {progress.step}"
            refresh()

        def on_interrupt(hit: Hit, error: str | None) -> None:
            if error is None:
                line = Text(f"  interruption warning to {hit.instance_id} at step {hit.step}", style="yellow")
            else:
                line = Text(
                    f"  could not interrupt {hit.instance_id} at step {hit.step}: {error}", style="red"
                )
            live.console.print(line, f"(attempt {hit.attempt}, planned at step {hit.planned_step})")

        injector = Injector(
            InterruptionSchedule(planned),
            job_progress(runtime, submitted.job_id),
            runtime.interrupt,
            on_interrupt=on_interrupt,
            on_progress=on_progress,
        )
        with live_view as live, injector:
            job = wait_for_job(runtime, submitted.job_id, on_change=show)
        pending = injector.schedule.pending
    console.print(final_summary(job, utc_now()))
    if pending:
        left = ", ".join(map(str, pending))
        console.print(f"[yellow]planned interruptions never reached: step {left}[/yellow]")
    # One line, however long the paths: they are to be copied, not read wrapped.
    console.print(f"control-plane logs: {log_file}; instances: {workdir}", soft_wrap=True)
    return job

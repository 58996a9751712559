"""``spotrun demo``: the example job in the embedded runtime, shown live, with planned spot interruptions."""

from __future__ import annotations

import shutil
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from spotrun.cli.display.gpu_health import latest_node_gpus
from spotrun.cli.display.gpu_health_render import gpu_lines
from spotrun.cli.display.summary import final_summary, status_text
from spotrun.cli.target import local_api_client
from spotrun.cli.workdir.upload import resolve_workdir, workdir_of
from spotrun.local.chaos.injector import Injector, Progress
from spotrun.local.chaos.plan import Hit, InterruptionSchedule, plan_interruptions
from spotrun.local.demo import (
    DEFAULT_EXAMPLE,
    Submitted,
    drop_manifest,
    example_dir,
    example_steps,
    job_progress,
    local_runtime,
    upload_example,
    wait_for_job,
)
from spotrun.local.runtime import LocalRuntime
from spotrun.model.job.record import Job, utc_now
from spotrun.model.manifest.parse import parse_manifest_text

# A framework example (torch, transformers) trains for minutes, not seconds.
DEMO_TIMEOUT_SECONDS = 1800.0


def plan_for_example(manifest: bytes, interruptions: int, seed: int) -> list[int]:
    """Steps at which to interrupt the example's training (see :func:`spotrun.local.chaos.plan.plan_interruptions`).

    Raises
    ------
    ValueError
        When that many interruptions do not fit in the example's run.
    """
    # Planned in the first 60 % of the run: a warning takes effect some steps after it is decided, and one
    # landing after the last step would change nothing.
    return plan_interruptions(interruptions, example_steps(manifest) * 3 // 5, seed, margin=0.15)


def submit_example(runtime: LocalRuntime, example: str, console: Console) -> Submitted:
    """Put the example's inputs in place and submit it, as a user would; return where it went.

    The NumPy example's code and data are uploaded under ``examples/`` and its manifest dropped in the jobs
    bucket. An example with ``training.workdir`` (and no data inputs: it makes or ships its data) goes through
    the path of ``spotrun submit``: its directory is packed, uploaded through the REST API's ``POST /code``, and
    the manifest submitted to ``POST /jobs``.
    """
    directory = example_dir(example)
    manifest = (directory / "manifest.yaml").read_bytes()
    parsed = parse_manifest_text(manifest)
    if parsed.training.workdir is None:
        upload_example(runtime, directory)
        submitted = drop_manifest(runtime, manifest, f"{example}.yaml")
        console.print(
            f"manifest dropped at s3://{runtime.settings.jobs_bucket}/{submitted.key} -> job {submitted.job_id}"
        )
        return submitted
    assert runtime.api_url is not None  # the embedded runtime serves the REST API
    client = local_api_client(runtime.api_url, runtime.settings.region)
    document = parsed.model_dump(mode="json", exclude_none=True)
    code_dir = workdir_of(document, directory / "manifest.yaml", None)
    assert code_dir is not None  # training.workdir is set
    resolved = resolve_workdir(document, code_dir, client, console)
    accepted = client.submit(resolved)
    console.print(f"manifest submitted to {runtime.api_url}/jobs -> job {accepted['job_id']}")
    return Submitted(job_id=accepted["job_id"], key="", etag="")


def run_demo(
    console: Console, workdir: Path, interruptions: int, seed: int, example: str = DEFAULT_EXAMPLE
) -> Job:
    """Run an example job end to end, interrupting it at ``interruptions`` random steps; return its record.

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
    example
        The directory under ``examples/`` (:func:`spotrun.local.demo.available_examples`).

    Returns
    -------
    Job
        The job's final record.

    Raises
    ------
    ValueError
        When there is no such example, or the interruptions do not fit in its run.
    """
    manifest = (example_dir(example) / "manifest.yaml").read_bytes()
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
        submitted = submit_example(runtime, example, console)

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
        gpus = Text("")

        def refresh() -> None:
            spinner.update(text=Text.assemble(state, step, gpus))

        def show(job: Job) -> None:
            nonlocal printed, state, gpus
            for change in job.timeline[printed:]:
                live.console.print(
                    Text.assemble("  ", status_text(change.status), f"  {change.detail or ''}")
                )
            printed = len(job.timeline)
            attempt = job.current_attempt
            where = f" on {attempt.instance_type} in {attempt.availability_zone}" if attempt else ""
            state = Text.assemble(status_text(job.status), where)
            # Each node's latest GPU sample as the record keeps it (memory above 90 % marked HIGH).
            gpus = Text("")
            for line in gpu_lines(latest_node_gpus(job, None)):
                gpus.append("\n  ").append_text(line)
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
            job = wait_for_job(runtime, submitted.job_id, on_change=show, timeout=DEMO_TIMEOUT_SECONDS)
        pending = injector.schedule.pending
        # While the API still answers: the job's report, as `spotrun report` writes it.
        report_line = demo_report(runtime, job.job_id, workdir / "report.html")
    console.print(final_summary(job, utc_now()))
    if pending:
        left = ", ".join(map(str, pending))
        console.print(f"[yellow]planned interruptions never reached: step {left}[/yellow]")
    # One line each, however long the paths: they are to be copied, not read wrapped.
    console.print(report_line, soft_wrap=True)
    console.print(f"control-plane logs: {log_file}; instances: {workdir}", soft_wrap=True)
    return job


def demo_report(runtime: LocalRuntime, job_id: str, html: Path) -> str:
    """Write the job's report (``html`` and its PNG beside it) through the runtime's API; the line that says where.

    Without the report's libraries (the ``report`` extra), no report, and the line says how to get one.
    """
    from spotrun.cli.report import INSTALL_HINT, missing_renderers

    if missing := missing_renderers():
        return f"report: not written, {', '.join(missing)} missing ({INSTALL_HINT})"
    from spotrun.cli.report.command import fetch_report, write_report

    png = html.with_suffix(".png")
    assert runtime.api_url is not None  # the embedded runtime serves the REST API
    client = local_api_client(runtime.api_url, runtime.settings.region)
    write_report(fetch_report(client, job_id), html, png)
    return f"report: {html} (its main chart: {png})"

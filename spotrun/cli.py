"""The ``spotrun`` command. It only translates: the decisions live in the modules it calls."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from spotrun.manifest import ManifestError, manifest_json_schema, parse_manifest_text

app = typer.Typer(
    help="Run deep-learning training on EC2 Spot GPUs, through interruptions, at spot prices.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the job manifest."""
    typer.echo(manifest_json_schema())


@app.command()
def validate(file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)]) -> None:
    """Check a manifest file (YAML or JSON); list every problem, each naming its field."""
    try:
        manifest = parse_manifest_text(file.read_bytes())
    except ManifestError as exc:
        err = Console(stderr=True)
        err.print(f"[red]{file}: {len(exc.errors)} problem(s)[/red]")
        for line in exc.errors:
            err.print(f"  - {line}", markup=False, highlight=False)
        raise typer.Exit(code=1) from exc
    typer.echo(f"{file}: valid manifest for job {manifest.name!r}")


@app.command()
def demo(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the final job record as JSON on the last line.")
    ] = False,
    workdir: Annotated[
        Path, typer.Option(help="Where the emulator keeps its files (instances, logs); emptied first.")
    ] = Path(".spotrun/demo"),
) -> None:
    """Run the example job end to end in the embedded AWS emulator (no AWS account needed)."""
    from spotrun.demo import (
        EXAMPLE_DIR,
        control_plane_logs,
        drop_manifest,
        local_runtime,
        upload_example,
        wait_for_job,
    )
    from spotrun.job import Job, utc_now
    from spotrun.summary import final_summary, job_record, status_text

    workdir = workdir.resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    out = sys.stderr if as_json else sys.stdout
    # Wide enough for the summary tables when the output is a file or a pipe; a terminal keeps its own width.
    console = Console(file=out, width=None if out.isatty() else 120)
    with local_runtime(workdir) as runtime, control_plane_logs(runtime.workdir / "control-plane.log"):
        console.print(
            f"[bold]spotrun demo[/bold]: AWS emulator on {runtime.endpoint_url}, time scale {runtime.time_scale}"
        )
        upload_example(runtime)
        manifest = (EXAMPLE_DIR / "manifest.yaml").read_bytes()
        submitted = drop_manifest(runtime, manifest, "tiny-regression.yaml")
        console.print(
            f"manifest dropped at s3://{runtime.settings.jobs_bucket}/{submitted.key} -> job {submitted.job_id}"
        )

        spinner = Spinner("dots", text="waiting for the S3 event to start the workflow")
        printed = 0
        live_view = Live(
            spinner,
            console=console,
            refresh_per_second=10,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        with live_view as live:

            def show(job: Job) -> None:
                nonlocal printed
                for change in job.timeline[printed:]:
                    live.console.print(
                        Text.assemble("  ", status_text(change.status), f"  {change.detail or ''}")
                    )
                printed = len(job.timeline)
                attempt = job.current_attempt
                where = f" on {attempt.instance_type} in {attempt.availability_zone}" if attempt else ""
                spinner.update(text=Text.assemble(status_text(job.status), where))

            job = wait_for_job(runtime, submitted.job_id, on_change=show)
        console.print(final_summary(job, utc_now()))
        console.print(
            f"control-plane logs: {runtime.workdir / 'control-plane.log'}; instances: {runtime.workdir}"
        )
    if as_json:
        sys.stdout.write(json.dumps(job_record(job)) + "\n")
    raise typer.Exit(code=0 if job.status.value == "SUCCEEDED" else 1)


if __name__ == "__main__":
    app()

"""The ``spotrun`` command. It only translates: the decisions live in the modules it calls."""

from __future__ import annotations

import json
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
    as_json: Annotated[bool, typer.Option("--json", help="Print the final job record as JSON on the last line.")] = False,
    workdir: Annotated[
        Path | None, typer.Option(help="Keep the emulator's files (instances, logs) here instead of a temp dir.")
    ] = None,
) -> None:
    """Run the example job end to end in the embedded AWS emulator (no AWS account needed)."""
    from spotrun.demo import EXAMPLE_DIR, drop_manifest, local_runtime, upload_example, wait_for_job
    from spotrun.job import Job, utc_now
    from spotrun.summary import final_summary, job_record, status_text

    console = Console(stderr=as_json)
    with local_runtime(workdir) as runtime:
        console.print(f"[bold]spotrun demo[/bold]: AWS emulator on {runtime.endpoint_url}, time scale {runtime.time_scale}")
        upload_example(runtime)
        manifest = (EXAMPLE_DIR / "manifest.yaml").read_bytes()
        submitted = drop_manifest(runtime, manifest, "tiny-regression.yaml")
        console.print(f"manifest dropped at s3://{runtime.settings.jobs_bucket}/{submitted.key} -> job {submitted.job_id}")

        spinner = Spinner("dots", text="waiting for the S3 event to start the workflow")
        with Live(spinner, console=console, refresh_per_second=10, transient=True) as live:

            def show(job: Job) -> None:
                attempt = job.current_attempt
                where = f" on {attempt.instance_type} ({attempt.lifecycle}) in {attempt.availability_zone}" if attempt else ""
                spinner.update(text=Text.assemble(status_text(job.status), where))
                latest = job.timeline[-1]
                live.console.print(Text.assemble("  ", status_text(latest.status), f"  {latest.detail or ''}"))

            job = wait_for_job(runtime, submitted.job_id, on_change=show)
        console.print(final_summary(job, utc_now()))
    if as_json:
        sys.stdout.write(json.dumps(job_record(job)) + "\n")
    raise typer.Exit(code=0 if job.status.value == "SUCCEEDED" else 1)

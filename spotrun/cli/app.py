"""The ``spotrun`` command. It only translates: the decisions live in the modules it calls."""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from typer._click.core import Context
from typer._click.exceptions import UsageError  # Typer vendors its own click: its errors are these
from typer.core import TyperGroup

from spotrun.cli.api import ManifestFile, read_manifest
from spotrun.cli.dashboard.command import dashboard
from spotrun.cli.display.output import JsonOpt, console, emit_json, fail, json_answer, usage_error_json
from spotrun.cli.jobs import register as register_api_commands
from spotrun.cli.local import local_app
from spotrun.cli.report.command import report
from spotrun.cli.simulate import simulate
from spotrun.cli.target import STATE_DIR_FLAG, targeted, with_state_dir
from spotrun.cli.workdir.upload import workdir_of
from spotrun.model.manifest.parse import manifest_json_schema


class _Commands(TyperGroup):
    """The root command: a usage error of any command given ``--json`` is also its JSON answer on stdout.

    Usage errors are raised while the root parses its own options (:meth:`make_context`) or, for a command and
    the groups under it, while the root runs it (:meth:`invoke`); both see the command line.
    """

    def make_context(
        self, info_name: str | None, args: list[str], parent: Context | None = None, **extra: Any
    ) -> Context:
        argv = list(args)  # click consumes the list it parses
        try:
            context = super().make_context(info_name, args, parent, **extra)
        except UsageError as exc:
            usage_error_json(exc, argv)
            raise
        context.meta[_ARGV] = argv
        return context

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            usage_error_json(exc, ctx.meta.get(_ARGV, []))
            raise


_ARGV = "spotrun.argv"
app = typer.Typer(
    cls=_Commands,
    help="Run deep-learning training on EC2 Spot GPUs, through interruptions, at spot prices.",
    no_args_is_help=True,
    add_completion=False,
)

app.add_typer(local_app, name="local")
register_api_commands(app)
app.command()(targeted(dashboard))
app.command()(targeted(report))
app.command()(simulate)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the job manifest."""
    typer.echo(manifest_json_schema())


@app.command()
def validate(file: ManifestFile, as_json: JsonOpt = False) -> None:
    """Check a manifest file (YAML or JSON); list every problem, each naming its field.

    With --json: ``{"file", "valid": true, "name", "workdir"}``, or the error object with every problem.
    """
    manifest = read_manifest(file)
    workdir = None
    if manifest["training"].get("workdir") is not None:
        directory = workdir_of(manifest, file, None)
        if directory is None or not directory.is_dir():
            raise fail(f"{file}: training.workdir: {directory} is not a directory")
        workdir = str(directory)
    if as_json:
        emit_json({"file": str(file), "valid": True, "name": manifest["name"], "workdir": workdir})
    elif workdir is not None:
        typer.echo(f"{file}: valid manifest for job {manifest['name']!r}; training.workdir is {workdir}")
    else:
        typer.echo(f"{file}: valid manifest for job {manifest['name']!r}")


@app.command()
@with_state_dir
def demo(
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            callback=json_answer,
            help="Print the final job record (or the error) as one JSON object.",
        ),
    ] = False,
    state_dir: Annotated[
        Path,
        typer.Option(
            STATE_DIR_FLAG,
            metavar="DIR",
            help="Where the emulator keeps its files (instances, logs); emptied first.",
        ),
    ] = Path(".spotrun/demo"),
    interruptions: Annotated[
        int,
        typer.Option(
            min=0,
            help="Spot interruptions to inject at random training steps, each into a new attempt; 0: none.",
        ),
    ] = 1,
    seed: Annotated[
        int | None, typer.Option(help="Seed of the interrupted steps (printed when chosen at random).")
    ] = None,
    example: Annotated[
        str, typer.Option(help="The example under examples/ to run, e.g. pytorch-digits.")
    ] = "tiny-regression",
) -> None:
    """Run an example job end to end in the embedded AWS emulator (no AWS account needed)."""
    from spotrun.cli.demo import run_demo
    from spotrun.control.views.job_json import job_record

    try:
        job = run_demo(
            console(stderr=as_json, highlight=True),
            state_dir.resolve(),
            interruptions,
            secrets.randbelow(1_000_000) if seed is None else seed,
            example,
        )
    except ValueError as exc:
        raise fail(exc, code=2) from None
    if as_json:
        sys.stdout.write(json.dumps(job_record(job)) + "\n")
    raise typer.Exit(code=0 if job.status.value == "SUCCEEDED" else 1)


if __name__ == "__main__":
    app()

"""``spotrun schedule create|list|delete|runs``: scheduled retraining through the REST API's schedule routes."""

from __future__ import annotations

from typing import Annotated

import typer

from spotrun.cli.api import ManifestFile, read_manifest, schedules_table
from spotrun.cli.display.output import JsonOpt, console, emit_json, fail
from spotrun.cli.target import DEFAULT_TARGET, ApiTarget, api_client, targeted
from spotrun.cli.workdir.pack import WorkdirError
from spotrun.cli.workdir.upload import resolve_workdir, workdir_of

ScheduleName = Annotated[str, typer.Argument(metavar="NAME", help="The schedule's name (its manifest's).")]

schedule_app = typer.Typer(help="Jobs started on a schedule (EventBridge Scheduler).", no_args_is_help=True)


@schedule_app.command("create")
@targeted
def schedule_create(
    file: ManifestFile,
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """Create a schedule from a manifest with a `schedule` block (validated locally first).

    A training.workdir is uploaded once, now, and every run of the schedule uses that snapshot.
    """
    manifest = read_manifest(file)
    if "schedule" not in manifest:
        raise fail(f"{file}: schedule: a manifest needs a schedule block to be scheduled")
    directory = workdir_of(manifest, file, None)
    with api_client(target) as client:
        if directory is not None:
            try:
                manifest = resolve_workdir(manifest, directory, client, console(stderr=as_json))
            except WorkdirError as exc:
                raise fail(exc) from None
        answer = client.create_schedule(manifest)
    if as_json:
        emit_json(answer)
    else:
        typer.echo(f"schedule {answer.get('name', manifest['name'])} created")


@schedule_app.command("list")
@targeted
def schedule_list(
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """List the schedules."""
    with api_client(target) as client:
        answer = client.list_schedules()
    found = list(answer.get("schedules") or [])
    if as_json:
        emit_json(answer)
    elif not found:
        typer.echo("no schedules")
    else:
        console().print(schedules_table(found))


@schedule_app.command("delete")
@targeted
def schedule_delete(
    name: ScheduleName,
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """Delete a schedule (jobs it started are kept)."""
    with api_client(target) as client:
        answer = client.delete_schedule(name) or {"name": name, "deleted": True}  # the API answers 204
    if as_json:
        emit_json(answer)
    else:
        typer.echo(f"schedule {name} deleted")


@schedule_app.command("runs")
@targeted
def schedule_runs(
    name: ScheduleName,
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """List a schedule's firings, newest first: the job each started, or why it was skipped."""
    with api_client(target) as client:
        answer = client.schedule_runs(name)
    runs = list(answer.get("runs") or [])
    if as_json:
        emit_json(answer)
    elif not runs:
        typer.echo(f"schedule {name} has not fired yet")
    else:
        console().print(schedules_table(runs, title=f"runs of {name}"))

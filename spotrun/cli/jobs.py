"""``spotrun submit|status|list|cancel|logs|restore``: the REST API from the command line (``schedule``: in
:mod:`spotrun.cli.schedules`).

Tables and progress for people; ``--json`` prints the API's answer (one object) for scripts. Exit codes: 0 ok,
1 refused by the API or invalid locally (message on stderr), 2 usage; ``submit --wait``: 0 succeeded, 3 stopped
at budget.max_usd, 4 stopped at max_runtime_minutes, 1 any other end.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from spotrun.cli.api import ManifestFile, as_job, jobs_table, read_manifest, restore_table
from spotrun.cli.client import SpotrunClient
from spotrun.cli.code_upload import resolve_workdir, workdir_of
from spotrun.cli.logs import logs
from spotrun.cli.output import JsonOpt, console, emit_json, fail, show
from spotrun.cli.schedules import schedule_app
from spotrun.cli.summary import final_summary, progress_text, status_text
from spotrun.cli.target import DEFAULT_TARGET, ApiTarget, api_client, targeted
from spotrun.cli.workdir import DEFAULT_MAX_BYTES, WorkdirError
from spotrun.model.job import JobStatus, utc_now
from spotrun.model.limits import exit_code

JobId = Annotated[str, typer.Argument(metavar="ID", help="The job's id.")]
MIB = 1024 * 1024
PollOpt = Annotated[float, typer.Option(min=0.05, help="Seconds between polls with --wait.")]


def _progress_line(view: dict[str, Any]) -> str:
    attempts = view.get("attempts") or []
    line = f"job {view['job_id']}: {view['status']}"
    if attempts:
        current = attempts[-1]
        step = current.get("last_step")
        line += f", attempt {current['number']} on {current['instance_type']} ({current['lifecycle']})"
        line += f", step {step}" if step is not None else ""
    return line


def _wait_for_job(client: SpotrunClient, job_id: str, poll: float, quiet: bool) -> dict[str, Any]:
    """Poll the job until it ends, with a live status line on the terminal (stderr when ``quiet``)."""
    view = client.get_job(job_id)
    with console(stderr=quiet).status(_progress_line(view)) as live:
        while not JobStatus(view["status"]).is_terminal:
            time.sleep(poll)
            view = client.get_job(job_id)
            live.update(_progress_line(view))
    return view


def _show_ended(view: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(view)
    else:
        console().print(final_summary(as_job(view), utc_now()))
    code = exit_code(view["status"], (view.get("error") or {}).get("type"))
    if code:
        raise typer.Exit(code=code)


def register(app: typer.Typer) -> None:
    """Add the API commands to ``app``."""
    for command in (submit, status, list_, cancel, logs, restore):
        app.command(name="list" if command is list_ else None)(targeted(command))
    app.add_typer(schedule_app, name="schedule")


def submit(
    file: ManifestFile,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="Retries with the same key start one job (default: the manifest's hash)."),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow the job until it ends; show its summary.")
    ] = False,
    poll: PollOpt = 1.0,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir",
            file_okay=False,
            help="The job's code: this local directory is packed (.gitignore and .spotrunignore honoured), "
            "uploaded once per content and run as training.code. Overrides the manifest's training.workdir.",
        ),
    ] = None,
    max_workdir_mib: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            help=f"Refuse a workdir holding more than this, MiB unpacked (default {DEFAULT_MAX_BYTES // MIB}).",
            show_default=False,
        ),
    ] = None,
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """Validate a manifest locally, then submit it; --wait follows the job to its end.

    With training.workdir in the manifest, or --workdir, the directory is uploaded first and submitted as
    training.code (the local runtime's directory is then --local-workdir).

    Exit codes with --wait: 0 succeeded, 3 stopped at budget.max_usd, 4 at max_runtime_minutes, 1 otherwise.
    """
    manifest = read_manifest(file)
    if workdir is not None and manifest["training"].get("code"):
        raise fail(f"{file}: training.code is set; --workdir would replace it (remove one of the two)")
    directory = workdir_of(manifest, file, workdir)
    if directory is None and max_workdir_mib is not None:
        raise fail(
            f"{file}: --max-workdir-mib limits a workdir, and there is none (training.workdir or --workdir)"
        )
    limit = DEFAULT_MAX_BYTES if max_workdir_mib is None else int(max_workdir_mib * MIB)
    with api_client(target) as client:
        if directory is not None:
            try:
                manifest = resolve_workdir(manifest, directory, client, console(stderr=as_json), limit)
            except WorkdirError as exc:
                raise fail(exc) from None
        accepted = client.submit(manifest, idempotency_key)
        if not wait:
            if as_json:
                emit_json(accepted)
            else:
                typer.echo(f"job {accepted['job_id']} {accepted['outcome']}")
            return
        view = _wait_for_job(client, accepted["job_id"], poll, as_json)
    _show_ended(view, as_json)


def status(
    job_id: Annotated[
        str | None, typer.Argument(metavar="[ID]", help="Default: the most recent job.")
    ] = None,
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """Show a job: status, timeline, attempts, cost, archived model."""
    with api_client(target) as client:
        if job_id is None:
            newest = client.list_jobs(limit=1)["jobs"]
            if not newest:
                raise fail("no jobs yet")
            job_id = str(newest[0]["job_id"])
        view = client.get_job(job_id)
    if as_json:
        emit_json(view)
        return
    now = utc_now()
    summary = final_summary(as_job(view), now)
    if view.get("progress"):  # a job that has not ended: where it stands, above its status line
        summary.renderables.insert(len(summary.renderables) - 1, progress_text(view["progress"], now))
    show(summary)


def list_(
    status: Annotated[JobStatus | None, typer.Option(help="Only jobs in this status.")] = None,
    name: Annotated[str | None, typer.Option(help="Only jobs of this name.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100, help="Jobs per page.")] = 20,
    all_pages: Annotated[bool, typer.Option("--all", help="Follow next_token to the last page.")] = False,
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """List jobs, newest first."""
    wanted = status.value if status is not None else None
    with api_client(target) as client:
        page = client.list_jobs(status=wanted, name=name, limit=limit)
        jobs = list(page["jobs"])
        while all_pages and page.get("next_token"):
            page = client.list_jobs(status=wanted, name=name, limit=limit, next_token=page["next_token"])
            jobs += page["jobs"]
    if as_json:
        emit_json({"jobs": jobs, "next_token": page.get("next_token")})
    elif not jobs:
        typer.echo("no jobs")
    else:
        show(jobs_table(jobs))
        if page.get("next_token"):
            typer.echo("more jobs: --all lists them all")


def cancel(
    job_id: JobId,
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """Cancel a job: stop its workflow, terminate its instances; its committed checkpoints are kept."""
    with api_client(target) as client:
        answer = client.cancel(job_id)
    if as_json:
        emit_json(answer)
        return
    terminated = ", ".join(answer["instances_terminated"]) or "none"
    console().print(f"job {job_id} ", status_text(JobStatus(answer["job"]["status"])), end="")
    console().print(f"; instances terminated: {terminated}")


def restore(
    job_id: JobId,
    days: Annotated[int, typer.Option(min=1, max=365, help="How long restored copies stay.")] = 7,
    wait: Annotated[bool, typer.Option("--wait", help="Poll until every object is readable.")] = False,
    poll: PollOpt = 30.0,
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """Restore a job's archived model from Glacier (idempotent); show where each object stands."""
    with api_client(target) as client:
        report = client.start_restore(job_id, days=days)
        if wait and not report["readable"]:
            with console(stderr=as_json).status(f"restoring the archived model of {job_id}"):
                while not report["readable"]:
                    time.sleep(poll)
                    report = client.restore_status(job_id)
    if as_json:
        emit_json(report)
    else:
        console().print(restore_table(report))
        typer.echo("readable" if report["readable"] else "not readable yet: `spotrun restore ID --wait`")

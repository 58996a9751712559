"""``spotrun submit|attach|status|list|cancel|logs|restore``: the REST API from the command line (``schedule``:
in :mod:`spotrun.cli.schedules`; following a job live: :mod:`spotrun.cli.attach`).

Tables and progress for people; ``--json`` prints the API's answer (one object) for scripts. Exit codes: 0 ok,
1 refused by the API or invalid locally (message on stderr), 2 usage; ``submit`` and ``attach`` following a job:
0 succeeded, 3 stopped at budget.max_usd, 4 stopped at max_runtime_minutes, 1 any other end, 130 detached.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer

from spotrun.cli.api import ManifestFile, as_job, jobs_table, restore_table
from spotrun.cli.attach import after_submit, follow_or_detach, should_follow
from spotrun.cli.display.gpu_health import read_telemetry
from spotrun.cli.display.gpu_health_render import health_json, health_parts
from spotrun.cli.display.output import JsonOpt, console, emit_json, fail, show
from spotrun.cli.display.summary import final_summary, progress_text, status_text
from spotrun.cli.logs import latest_job_id, logs
from spotrun.cli.plan import MaxWorkdirMibOpt, manifest_and_workdir, plan, show_plan
from spotrun.cli.schedules import schedule_app
from spotrun.cli.target import DEFAULT_TARGET, ApiTarget, api_client, targeted
from spotrun.cli.workdir.pack import WorkdirError
from spotrun.cli.workdir.upload import resolve_workdir
from spotrun.model.job.limits import exit_code
from spotrun.model.job.record import JobStatus, utc_now

JobId = Annotated[str, typer.Argument(metavar="ID", help="The job's id.")]
FOLLOW_POLL_SECONDS = 1.0
PollOpt = Annotated[float, typer.Option(min=0.05, help="Seconds between polls while following the job.")]


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
    for command in (submit, plan, attach, status, list_, cancel, logs, restore):
        app.command(name="list" if command is list_ else None)(targeted(command))
    app.add_typer(schedule_app, name="schedule")


def submit(
    file: ManifestFile,
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="Retries with the same key start one job (default: the manifest's hash)."),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option("--wait", help="Follow the job until it ends, even off a terminal; show its summary."),
    ] = False,
    detach: Annotated[
        bool, typer.Option("--detach", help="Print the job id and return, even on a terminal.")
    ] = False,
    poll: Annotated[
        float | None,
        typer.Option(
            min=0.05,
            help=f"Seconds between polls while following the job (default {FOLLOW_POLL_SECONDS:g}).",
            show_default=False,
        ),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir",
            file_okay=False,
            help="The job's code: this local directory is packed (.gitignore and .spotrunignore honoured), "
            "uploaded once per content and run as training.code. Overrides the manifest's training.workdir.",
        ),
    ] = None,
    max_workdir_mib: MaxWorkdirMibOpt = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Show the plan (spotrun plan FILE) and submit nothing."),
    ] = False,
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """Validate a manifest locally, then submit it; on a terminal, follow the job live until it ends.

    The live view prints each state change, attempt, interruption warning and the log tail; Ctrl-C detaches
    (the job keeps running; `spotrun attach ID` comes back). Off a terminal, or with --detach, it prints the
    job id and returns; --wait follows the job even off a terminal. Re-submitting the manifest of an ended job
    starts nothing and says so.

    With training.workdir in the manifest, or --workdir, the directory is uploaded first and submitted as
    training.code (--state-dir names the local runtime's state directory).

    --dry-run shows the plan instead (spotrun plan FILE) and submits nothing.

    Exit codes when following: 0 succeeded, 3 stopped at budget.max_usd, 4 at max_runtime_minutes, 1
    otherwise, 130 detached by Ctrl-C.
    """
    if wait and detach:
        raise fail("--wait follows the job and --detach returns at once: give one of the two", code=2)
    if poll is not None and (dry_run or not should_follow(wait=wait, detach=detach, as_json=as_json)):
        raise fail(
            "--poll sets how often a followed job is read, and this submit does not follow it "
            "(--detach, --dry-run, --json or no terminal): add --wait to follow it",
            code=2,
        )
    manifest, directory, limit = manifest_and_workdir(file, workdir, max_workdir_mib)
    if dry_run:
        if wait or detach or idempotency_key:
            raise fail(
                "--dry-run submits nothing: --wait, --detach and --idempotency-key would have no job to act on"
            )
        with api_client(target) as client:
            show_plan(manifest, directory, client, limit, as_json)  # exit 1 when it has problems
        return
    with api_client(target) as client:
        if directory is not None:
            try:
                manifest = resolve_workdir(manifest, directory, client, console(stderr=as_json), limit)
            except WorkdirError as exc:
                raise fail(exc) from None
        accepted = client.submit(manifest, idempotency_key)
        view = after_submit(
            client,
            accepted,
            file,
            wait=wait,
            detach=detach,
            as_json=as_json,
            poll=FOLLOW_POLL_SECONDS if poll is None else poll,
        )
    if view is not None:
        _show_ended(view, as_json)


def status(
    job_id: Annotated[
        str | None, typer.Argument(metavar="[ID]", help="Default: the most recent job.")
    ] = None,
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """Show a job: status, timeline, attempts, GPU health, latest training metrics, cost, archived model.

    GPU health is each node's latest sample in the job's latest attempt (utilization, memory, PCIe per GPU), with
    a flag where GPU memory went above 90 %; the metrics are the latest value of each the script reported. --json
    adds them to the job's view (gpu_health, gpu_memory_warnings, latest_metrics).
    """
    with api_client(target) as client:
        view = client.get_job(job_id or latest_job_id(client))
        telemetry, problem = read_telemetry(client, view["job_id"])
    job = as_job(view)
    if as_json:
        emit_json({**view, **health_json(job, telemetry, problem)})
        return
    now = utc_now()
    summary = final_summary(job, now)
    # Above the status line: the GPUs and metrics, then (a job that has not ended) where it stands.
    for part in health_parts(job, telemetry, now, problem):
        summary.renderables.insert(len(summary.renderables) - 1, part)
    if view.get("progress"):  # a job that has not ended: where it stands, above its status line
        summary.renderables.insert(len(summary.renderables) - 1, progress_text(view["progress"], now))
    show(summary)


def attach(
    job_id: Annotated[
        str | None, typer.Argument(metavar="[ID]", help="Default: the most recent job.")
    ] = None,
    poll: PollOpt = 1.0,
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """Follow a job live until it ends, as `submit` does on a terminal; Ctrl-C detaches again.

    Exit codes: 0 succeeded, 3 stopped at budget.max_usd, 4 at max_runtime_minutes, 1 otherwise, 130 detached.
    With --json the view goes to stderr and stdout holds the ended job.
    """
    with api_client(target) as client:
        job_id = job_id or latest_job_id(client)
        view = follow_or_detach(client, job_id, console(stderr=as_json), poll)
    _show_ended(view, as_json)


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

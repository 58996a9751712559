"""``spotrun report [ID] [-o F.html] [--png F.png]``: write a job's report, a page that opens with no network,
and a PNG of its main chart (for a README or a chat).

It reads the job and its telemetry through the REST API (``GET /jobs/{id}``, ``GET /jobs/{id}/telemetry``) of
the target the options name, as ``spotrun status`` does; the drawing is :mod:`spotrun.cli.report`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from spotrun.cli.client import ApiError, SpotrunClient
from spotrun.cli.display.output import JsonOpt, emit_json, error_console, fail
from spotrun.cli.logs import latest_job_id
from spotrun.cli.report import INSTALL_HINT, missing_renderers, render_html, render_png, report_from_api
from spotrun.cli.target import DEFAULT_TARGET, ApiTarget, api_client
from spotrun.control.views.report_model import JobReport
from spotrun.model.job.record import utc_now


def fetch_report(client: SpotrunClient, job_id: str) -> JobReport:
    """The report of ``job_id`` as the API shows it now.

    A job the API does not know is an error (:class:`ApiError`); telemetry the API cannot serve (a stack deployed
    before its route: 404 on a job that exists) leaves the charts of metrics and GPUs empty, and the report says
    why.
    """
    view = client.get_job(job_id)
    telemetry: dict[str, Any] | None = None
    unavailable = None
    try:
        telemetry = client.telemetry(job_id)
    except ApiError as exc:
        if exc.status != 404:
            raise
        unavailable = f"{exc.message} (HTTP 404: a stack deployed before GET /jobs/{{id}}/telemetry?)"
    return report_from_api(view, telemetry, utc_now(), unavailable)


def write_report(report: JobReport, html: Path, png: Path) -> None:
    """Write the page and the main chart's PNG (their folders are made)."""
    for path in (html, png):
        path.parent.mkdir(parents=True, exist_ok=True)
    html.write_text(render_html(report), encoding="utf-8")
    render_png(report, png)


def report(
    job_id: Annotated[
        str | None, typer.Argument(metavar="[ID]", help="Default: the most recent job.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            dir_okay=False,
            help="The HTML file to write. Default: <ID>.html in the current directory.",
            show_default=False,
        ),
    ] = None,
    png: Annotated[
        Path | None,
        typer.Option(
            "--png",
            dir_okay=False,
            help="The PNG of the main chart (the attempts across pools and zones, above the cost). Default: the "
            "HTML file's name with .png.",
            show_default=False,
        ),
    ] = None,
    target: ApiTarget = DEFAULT_TARGET,
    as_json: JsonOpt = False,
) -> None:
    """Write a job's report: one self-contained HTML page (it opens with no network) and a PNG of its main chart.

    The page shows the attempts as a timeline across pools and zones with each state's duration, the warnings and
    interruptions, the checkpoints restored and the steps lost, the training metrics and GPU readings against
    time, the cost accrued against the same instance-time on demand, and the table of attempts. A job that runs
    is reported as it stands.

    With --json: ``{"job_id", "html", "png", "attempts", "zones", "cost_usd"}``.
    """
    missing = missing_renderers()
    if missing:
        raise fail(
            f"spotrun report draws with matplotlib and Jinja2; missing: {', '.join(missing)}: {INSTALL_HINT}"
        )
    with api_client(target) as client:
        job_id = job_id or latest_job_id(client)
        made = fetch_report(client, job_id)
    html = output or Path(f"{job_id}.html")
    chart = png or html.with_suffix(".png")
    try:
        write_report(made, html, chart)
    except OSError as exc:
        raise fail(f"could not write the report: {exc}") from None
    if made.telemetry_unavailable:
        error_console().print(f"warning: no telemetry: {made.telemetry_unavailable}")
    attempts = sum(1 for row in made.attempts if not row.unused)
    if as_json:
        emit_json(
            {
                "job_id": made.job_id,
                "html": str(html),
                "png": str(chart),
                "attempts": attempts,
                "zones": made.zones,
                "cost_usd": made.cost.usd,
            }
        )
        return
    typer.echo(
        f"report of {made.job_id} ({made.status.value}, {attempts} attempt{'s' if attempts != 1 else ''} in "
        f"{len(made.zones)} zone{'s' if len(made.zones) != 1 else ''}, ${made.cost.usd:.4f}): {html}; "
        f"main chart: {chart}"
    )

"""The dashboard's pages: a Flask app over one client of the REST API.

Every page is rendered on the server from the API's answers (Jinja2 templates, autoescaped); the browser gets
HTML and one vendored script, htmx, which replaces a page's live part with the fragment its ``hx-get`` names every
few seconds. ``static/htmx.min.js`` is ``dist/htmx.min.js`` of the npm package ``htmx.org`` 2.0.11 (tarball
integrity sha512-Thx/WtpeOQqSrqBCw/A1cwGJGg4UrVa3+sW0GmrM3p4gJgO89ecH4qtbnyzDDWFvBTqjnIMCgELTNt636dtamA==; file
sha256 d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717), with its license
(``static/htmx.LICENSE.txt``, BSD-0-Clause); ``npm pack htmx.org@VERSION`` fetches another (then update
:data:`HTMX_SHA256`). A fragment that needs
no more refreshing (a job that ended) comes back without its ``hx-trigger``, and the polling stops.

Read-only: every route answers GET (and HEAD) only; Flask answers any other method 405. Requests whose ``Host`` is
not one of ``trusted_hosts`` are refused (400), so that a web page the user visits cannot read the dashboard
through a DNS name rebound to 127.0.0.1.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Collection
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from flask import Flask, Response, abort, render_template, request
from markupsafe import Markup
from werkzeug.exceptions import HTTPException, SecurityError

from spotrun.cli.client import ApiError
from spotrun.cli.display.summary import duration
from spotrun.model.job.record import JobStatus, utc_now

HERE = Path(__file__).parent
HTMX_SHA256 = (
    "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717"  # htmx.org 2.0.11's dist/htmx.min.js
)
JOBS_PER_PAGE = 50
# Seconds between two refreshes of a live part: the job list and the schedules are one API call each (a schedule's
# runs one more); a running job's page also draws its charts again (1.7 s for a short job on this project's 2-core
# machines), so it waits longer: at least RENDER_SHARE_INVERSE times its last drawing, so that one open page keeps
# at most a quarter of a core busy.
LIST_REFRESH_SECONDS = 3.0
JOB_REFRESH_SECONDS = 5.0
RENDER_SHARE_INVERSE = 4
# The names a browser on this machine gives a server bound to the IPv4 loopback interface.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")
# Only the dashboard's own files: the vendored htmx and the stylesheet. The report's charts are inline SVG
# (and may carry inline styles); nothing is loaded from elsewhere.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class DashboardClient(Protocol):
    """What the dashboard reads from the REST API: :class:`spotrun.cli.client.SpotrunClient`'s read routes."""

    def list_jobs(
        self,
        status: str | None = None,
        name: str | None = None,
        limit: int | None = None,
        next_token: str | None = None,
    ) -> dict[str, Any]: ...

    def get_job(self, job_id: str) -> dict[str, Any]: ...

    def telemetry(self, job_id: str) -> dict[str, Any]: ...

    def list_schedules(self) -> dict[str, Any]: ...

    def schedule_runs(self, name: str) -> dict[str, Any]: ...


def report_html(view: dict[str, Any], telemetry: dict[str, Any], now: datetime) -> str:
    """The report's body (``spotrun report``'s page without its frame) of a job view and its telemetry.

    Parameters
    ----------
    view
        The API's job view (``GET /jobs/{id}``).
    telemetry
        The job's telemetry (``GET /jobs/{id}/telemetry``); empty when it was not answered.
    now
        The time the running figures (cost, durations) are taken at.

    Returns
    -------
    str
        An HTML fragment, its text escaped by the report's renderer.
    """
    # Imported at first use: matplotlib is loaded by a job's page only, never by the list.
    from spotrun.cli.report import render_body, report_from_api

    return render_body(report_from_api(view, telemetry, now))


def create_app(
    client: DashboardClient,
    *,
    trusted_hosts: Collection[str] | None = LOOPBACK_HOSTS,
    list_refresh_seconds: float = LIST_REFRESH_SECONDS,
    job_refresh_seconds: float = JOB_REFRESH_SECONDS,
    api_name: str | None = None,
) -> Flask:
    """The dashboard over ``client``.

    Parameters
    ----------
    client
        Reads the REST API, signed with the caller's credentials (or the local runtime's user's).
    trusted_hosts
        The ``Host`` names requests may carry (any port); None: any. The loopback names by default, as the
        server binds 127.0.0.1.
    list_refresh_seconds, job_refresh_seconds
        How often the browser refreshes the job list and schedules, and a running job's page.
    api_name
        What the pages call the API they read (its URL by default), in their footer.

    Returns
    -------
    Flask
        The WSGI application: GET routes only.
    """
    app = Flask(
        __name__,
        template_folder=str(HERE / "templates"),
        static_folder=str(HERE / "static"),
        static_url_path="/static",
    )
    app.config["TRUSTED_HOSTS"] = list(trusted_hosts) if trusted_hosts is not None else None
    app.config["SEND_FILE_MAX_AGE_DEFAULT"] = 3600
    source = api_name or str(getattr(client, "base_url", "the spotrun API"))

    @app.context_processor
    def _everywhere() -> dict[str, Any]:
        return {"api_name": source, "list_refresh": f"{list_refresh_seconds:g}s"}

    app.add_template_filter(_money, "money")
    app.add_template_filter(duration, "duration")
    app.add_template_filter(_when, "when")

    @app.after_request
    def _headers(response: Response) -> Response:
        response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        if not request.path.startswith("/static/"):
            response.headers["Cache-Control"] = "no-store"  # every answer is today's figures
        return response

    @app.errorhandler(HTTPException)
    def _refused(exc: HTTPException) -> tuple[str, int, dict[str, str]]:
        # In the dashboard's frame, saying why (no such job, an unknown status, a change refused: read-only).
        if exc.code == 405:
            exc.description = "The dashboard is read-only: use the spotrun command to change anything."
        # A 405 names the methods the route answers.
        allow = {name: value for name, value in exc.get_headers() if name == "Allow"}
        if isinstance(exc, SecurityError):  # an untrusted Host: no URL of the dashboard can be built for it
            return (
                f"{exc.code} {exc.name}: {exc.description}",
                exc.code or 400,
                {"Content-Type": "text/plain"},
            )
        page = render_template("refused.html", code=exc.code, name=exc.name, description=exc.description)
        return page, exc.code or 500, allow

    @app.get("/")
    def jobs() -> tuple[str, int]:
        return _render_jobs("jobs.html", client)

    @app.get("/fragments/jobs")
    def jobs_fragment() -> tuple[str, int]:
        return _render_jobs("_jobs.html", client, fragment=True)

    @app.get("/jobs/<job_id>")
    def job(job_id: str) -> tuple[str, int]:
        return _render_job("job.html", client, job_id, job_refresh_seconds)

    @app.get("/fragments/jobs/<job_id>")
    def job_fragment(job_id: str) -> tuple[str, int]:
        return _render_job("_job.html", client, job_id, job_refresh_seconds, fragment=True)

    @app.get("/schedules")
    def schedules() -> tuple[str, int]:
        return _render_schedules("schedules.html", client)

    @app.get("/fragments/schedules")
    def schedules_fragment() -> tuple[str, int]:
        return _render_schedules("_schedules.html", client, fragment=True)

    return app


def _answer(call: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any] | None, ApiError | None]:
    try:
        return call(), None
    except ApiError as exc:
        return None, exc


def _status_of(error: ApiError | None, fragment: bool) -> int:
    """A full page says by its status that the API failed (502, or its own 4xx); a fragment answers 200, since
    htmx swaps only successful answers in, and the page must show the error and keep polling."""
    if error is None or fragment:
        return 200
    return error.status if 400 <= error.status < 500 else 502


def _render_jobs(template: str, client: DashboardClient, fragment: bool = False) -> tuple[str, int]:
    status = request.args.get("status") or None
    if status is not None and status not in JobStatus.__members__:
        abort(400, f"unknown status {status!r}")
    page, error = _answer(lambda: client.list_jobs(status=status, limit=JOBS_PER_PAGE))
    now = utc_now()
    return render_template(
        template,
        jobs=[_job_row(job, now) for job in (page or {}).get("jobs", [])],
        more=bool((page or {}).get("next_token")),
        status=status,
        statuses=list(JobStatus),
        error=error,
        refreshed_at=now,
    ), _status_of(error, fragment)


def _job_row(job: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A job of ``GET /jobs`` with the figures ``spotrun list`` shows, as the templates use them."""
    status = JobStatus(job["status"])
    return {
        **job,
        "terminal": status.is_terminal,
        "waiting": bool(job.get("waiting_for_capacity_since")),
        "label": f"{status.value} ({job['error_type']})"
        if status is JobStatus.FAILED and job.get("error_type")
        else status.value,
    }


def _render_job(
    template: str, client: DashboardClient, job_id: str, refresh_seconds: float, fragment: bool = False
) -> tuple[str, int]:
    view, error = _answer(lambda: client.get_job(job_id))
    if error is not None and error.status == 404:
        abort(404, f"no job {job_id}")
    body: Markup | None = None
    telemetry_error: ApiError | None = None
    now = utc_now()
    if view is not None:
        telemetry, telemetry_error = _answer(lambda: client.telemetry(job_id))
        # Without its telemetry (not answered) the report still tells the record's story; the page says what is
        # missing. The report's renderer escapes every text of the job it writes: its fragment is trusted HTML.
        started = time.monotonic()
        body = Markup(report_html(view, telemetry or {}, now))  # noqa: S704
        refresh_seconds = max(refresh_seconds, math.ceil(RENDER_SHARE_INVERSE * (time.monotonic() - started)))
    running = view is not None and not JobStatus(view["status"]).is_terminal
    return render_template(
        template,
        job_id=job_id,
        view=view,
        body=body,
        error=error,
        telemetry_error=telemetry_error,
        live=running or view is None,  # an unreachable API is asked again
        refresh=f"{refresh_seconds:g}s",
        refreshed_at=now,
    ), _status_of(error, fragment)


def _render_schedules(template: str, client: DashboardClient, fragment: bool = False) -> tuple[str, int]:
    answer, error = _answer(client.list_schedules)
    schedules = []
    for schedule in (answer or {}).get("schedules", []):
        runs, runs_error = _answer(functools.partial(client.schedule_runs, schedule["name"]))
        schedules.append({"schedule": schedule, "runs": (runs or {}).get("runs", []), "error": runs_error})
    return render_template(template, schedules=schedules, error=error, refreshed_at=utc_now()), _status_of(
        error, fragment
    )


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"


def _when(value: str | datetime | None) -> str:
    if value is None:
        return "-"
    at = datetime.fromisoformat(value) if isinstance(value, str) else value
    return at.strftime("%Y-%m-%d %H:%M:%S")

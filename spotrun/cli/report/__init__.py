"""``spotrun report``: a job's report as one self-contained HTML page and a PNG of its main chart.

The data is :func:`spotrun.control.views.report.build_report`'s; this package draws it. matplotlib (the charts) and
Jinja2 (the page) are the ``report`` extra, imported when a report is rendered, never when the CLI starts:
:func:`missing_renderers` says which are absent. The dashboard's job page embeds :func:`render_body`.
"""

from __future__ import annotations

import importlib.util
from datetime import datetime
from pathlib import Path
from typing import Any

from spotrun.control.views.report import build_report
from spotrun.control.views.report_model import JobReport
from spotrun.model.job.telemetry import JobTelemetry

RENDERERS = ("matplotlib", "jinja2")
INSTALL_HINT = "pip install 'spotrun[report]'"


def missing_renderers() -> list[str]:
    """The libraries a report is drawn with that are not installed (matplotlib, Jinja2); empty when both are."""
    return [name for name in RENDERERS if importlib.util.find_spec(name) is None]


def report_from_api(
    view: dict[str, Any], telemetry: dict[str, Any] | None, now: datetime, unavailable: str | None = None
) -> JobReport:
    """The report of a job as the REST API shows it: ``GET /jobs/{id}`` and ``GET /jobs/{id}/telemetry``.

    Parameters
    ----------
    view
        The job's view.
    telemetry
        Its telemetry document (a ``JobTelemetry``); None when it could not be read.
    now
        The end of what still runs.
    unavailable
        Why the telemetry could not be read (the report says it).
    """
    from spotrun.cli.api import as_job

    series = JobTelemetry() if telemetry is None else JobTelemetry.model_validate(telemetry)
    return build_report(as_job(view), series, now, telemetry_unavailable=unavailable)


def render_html(report: JobReport) -> str:
    """The report as one self-contained HTML page (see :func:`spotrun.cli.report.page.render_html`)."""
    from spotrun.cli.report.page import render_html as render

    return render(report)


def render_body(report: JobReport) -> str:
    """The report's HTML fragment, without ``<html>`` or ``<head>`` (:func:`spotrun.cli.report.page.render_body`)."""
    from spotrun.cli.report.page import render_body as render

    return render(report)


def render_png(report: JobReport, path: Path) -> None:
    """Write the report's main chart (the attempts across pools and zones, above the cost) as a PNG at ``path``."""
    from spotrun.cli.report.figures import png
    from spotrun.cli.report.timeline_chart import main_figure

    png(main_figure, report, path)

"""The report as HTML: Jinja2 fills the templates shipped in this package (``templates/``), with the charts inline.

The page holds everything it shows (styles, SVG charts; no script), and its Content-Security-Policy forbids every
fetch, so it opens the same with no network. :func:`render_body` is the fragment the dashboard's job page embeds.
"""

from __future__ import annotations

import functools
from datetime import datetime

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from spotrun.cli.display.summary import cost_lines, duration
from spotrun.cli.report.figures import svg
from spotrun.cli.report.style import STATE_COLOURS
from spotrun.cli.report.telemetry_charts import MAX_METRIC_PANELS, gpu_figure, metrics_by_step, metrics_figure
from spotrun.cli.report.timeline_chart import main_figure
from spotrun.control.views.report import END_REASON_TEXT, end_kind
from spotrun.control.views.report_model import JobReport


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S")


def _since(at: datetime, report: JobReport) -> str:
    seconds = (at - report.created_at).total_seconds()
    return f"+{seconds:.1f} s" if seconds < 60 else f"+{duration(seconds)}"


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else duration(seconds)


def _number(value: float) -> str:
    return f"{value:.4g}"


@functools.cache
def _environment() -> Environment:
    environment = Environment(
        loader=PackageLoader("spotrun.cli.report", "templates"),
        autoescape=select_autoescape(["html", "html.j2"]),
        undefined=StrictUndefined,  # a misspelt name fails the render instead of printing nothing
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    environment.filters.update(
        when=_when,
        since=_since,
        dur=_duration,
        num=_number,
        money=lambda usd: f"${usd:.4f}",
        reason=lambda reason: "running" if reason is None else END_REASON_TEXT.get(reason, reason),
        kind=end_kind,
    )
    return environment


def render_body(report: JobReport) -> str:
    """The report as an HTML fragment (an ``<article>`` with its own scoped styles): no ``<html>`` or ``<head>``.

    Parameters
    ----------
    report
        The job's report (:func:`spotrun.control.views.report.build_report`).

    Returns
    -------
    str
        The same text for the same report.
    """
    main = svg(main_figure, report, "main")
    metrics = svg(metrics_figure, report, "metrics")
    gpus = svg(gpu_figure, report, "gpu")
    return (
        _environment()
        .get_template("body.html.j2")
        .render(
            r=report,
            attempts=[row for row in report.attempts if not row.unused],
            on_demand=(
                report.cost_series[-1].on_demand_usd
                if report.cost_series and report.cost.savings_pct is not None
                else None
            ),
            main_svg=Markup(main),  # noqa: S704 - matplotlib's own SVG output, ids prefixed; no user text unescaped
            metrics_svg=None if metrics is None else Markup(metrics),  # noqa: S704 - as above
            gpu_svg=None if gpus is None else Markup(gpus),  # noqa: S704 - as above
            max_panels=MAX_METRIC_PANELS,
            metrics_by_step=metrics_by_step(report),
            colours=STATE_COLOURS,
            cost_lines=cost_lines(report.cost),
        )
    )


def render_html(report: JobReport) -> str:
    """The report as one self-contained HTML page (:func:`render_body` in a document that fetches nothing).

    Parameters
    ----------
    report
        The job's report.

    Returns
    -------
    str
        The page; the same text for the same report.
    """
    body = Markup(render_body(report))  # noqa: S704 - rendered above with autoescape on
    return _environment().get_template("page.html.j2").render(r=report, body=body)

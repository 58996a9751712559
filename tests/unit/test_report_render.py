"""The report drawn: one HTML page that fetches nothing, its body for the dashboard, and the main chart's PNG."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import matplotlib
import pytest
from PIL import Image

from spotrun.cli.report import render_body, render_html, render_png
from spotrun.cli.report.figures import svg
from spotrun.cli.report.telemetry_charts import metrics_figure
from spotrun.control.views.report import build_report
from spotrun.model.job.record import JobError
from spotrun.model.job.telemetry import JobTelemetry
from tests.unit.report_world import ZONES, at, group_job, interrupted_job, running_job, telemetry


@pytest.fixture(scope="module")
def report():
    return build_report(interrupted_job(), telemetry(), at(600))


@pytest.fixture(scope="module")
def page(report) -> str:
    return render_html(report)


class _Resources(HTMLParser):
    """Every attribute that makes a browser fetch something, and every element that may."""

    def __init__(self) -> None:
        super().__init__()
        self.fetched: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        fetching = {"src", "href", "xlink:href", "srcset", "poster", "data", "action"}
        for name, value in attrs:
            if name in fetching and value and not value.startswith("#"):
                self.fetched.append(f"{tag} {name}={value}")


def test_the_page_shows_the_attempts_zones_cost_and_a_metric_series(report, page):
    # Given the page of a job interrupted four times across three zones
    # Then it says five attempts, names each zone and its cost, in the figures and the table
    assert 'data-attempts="5"' in page
    assert "<dt>attempts</dt><dd>5</dd>" in page
    assert len(re.findall(r'<tr class="[^"]*" data-attempt="\d"', page)) == 5
    for zone in ZONES:
        assert zone in page
    assert f"${report.cost.usd:.4f}" in page
    assert f"{report.cost.savings_pct:.1f} %" in page
    # And the loss series is charted (its SVG) and summed up (its last value, at its last step)
    charts = re.findall(r"<svg [^>]*class=\"chart\".*?</svg>", page, flags=re.DOTALL)
    assert len(charts) == 3  # the main chart, the metrics, the GPUs
    [metrics] = [chart for chart in charts if 'id="metrics-figure_1"' in chart]
    assert ">loss</text>" in metrics  # its panel's axis label
    for number in range(1, 6):  # one line per attempt, in the legend
        assert f">attempt {number}</text>" in metrics
    assert '<tr data-metric="loss">' in page
    assert f"{report.metric_summaries[0].last:.4g}" in page
    # And the GPU readings are charted, with the memory flag of attempt 3
    assert 'id="gpu-figure_1"' in page
    assert "attempt 3: GPU 0 memory at 93.5 %" in page
    # And the warnings, the loss without warning and the hang are listed
    assert "attempt 3: instance lost without a warning at step 3100" in page
    assert "training steps stopped advancing (hung)" in page


def test_the_page_fetches_nothing(page):
    # Given the page
    parser = _Resources()

    # When it is parsed as a browser would
    parser.feed(page)

    # Then nothing in it points anywhere but into itself: no script, no stylesheet link, no font, no URL at all
    assert parser.fetched == []
    assert not parser.tags & {"script", "link", "img", "iframe", "object", "embed"}
    assert "http://" not in page
    assert "https://" not in page
    assert "@import" not in page
    assert "url(" not in page.replace("url(#", "")
    # And its policy forbids any fetch the browser might still try
    assert "default-src 'none'" in page


def test_the_body_is_a_fragment_the_dashboard_can_embed(report, page):
    # When the body is rendered alone
    body = render_body(report)

    # Then it has no document around it, its styles are scoped, and the page holds it whole
    assert "<html" not in body
    assert "<head>" not in body
    assert "<!doctype" not in body.lower()
    assert body.lstrip().startswith('<article class="spotrun-report"')
    assert all(
        rule.strip().startswith(".spotrun-report")
        for rule in re.findall(r"(?m)^([^{}\n]+)\{", body.split("<style>")[1].split("</style>")[0])
    )
    assert body in page


def test_the_same_report_renders_to_the_same_bytes(report, tmp_path):
    # When the page and the PNG are rendered twice
    first, second = render_html(report), render_html(report)
    render_png(report, tmp_path / "a.png")
    render_png(report, tmp_path / "b.png")

    # Then they are identical, byte for byte
    assert first == second
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()


def test_the_png_is_a_picture_of_the_main_chart(report, tmp_path):
    # When the main chart is written as a PNG
    path = tmp_path / "chart.png"
    render_png(report, path)

    # Then it is a valid PNG of a size fit for a README
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        width, height = image.size
        assert image.format == "PNG"
    assert 1000 <= width <= 2000
    assert 600 <= height <= 1400
    assert 30_000 < path.stat().st_size < 1_000_000


def test_rendering_leaves_matplotlibs_settings_and_backend_alone(report, tmp_path):
    # Given the process's matplotlib settings
    before = dict(matplotlib.rcParams)
    backend = matplotlib.get_backend()

    # When a report is rendered
    render_html(report)
    render_png(report, tmp_path / "chart.png")

    # Then they are as they were
    assert dict(matplotlib.rcParams) == before
    assert matplotlib.get_backend() == backend


def test_a_running_job_a_group_and_a_job_without_telemetry_render_too(tmp_path):
    # Given a job that runs, a two-node job, and neither with telemetry
    running = build_report(running_job(200), JobTelemetry(), at(200))
    group = build_report(group_job(), JobTelemetry(), at(200))

    # When they are rendered
    running_page, group_page = render_html(running), render_html(group)
    render_png(group, tmp_path / "group.png")

    # Then the running one says it runs, the group lists its nodes, and both say there is no telemetry
    assert "running: as of" in running_page
    assert "<h3>Nodes</h3>" in group_page
    assert group_page.count("kept from #1") == 1
    for html in (running_page, group_page):
        assert "The training script reported no metrics" in html
        assert "No GPU readings were reported" in html
    assert (tmp_path / "group.png").stat().st_size > 10_000


def test_text_from_the_record_is_escaped():
    # Given a record whose error message holds markup
    job = interrupted_job()
    job = job.model_copy(
        update={
            "status": job.status.FAILED,
            "error": JobError(type="Training.Failed", message="<script>alert(1)</script>"),
        }
    )
    failed = build_report(job, JobTelemetry(), at(600))

    # When it is rendered
    page = render_html(failed)

    # Then the markup is shown as text
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_metrics_are_drawn_against_the_step_unless_a_report_has_none(report):
    # Given the loss reported with its steps, and the same reports without a step
    stepless = report.model_copy(
        update={"metrics": {"loss": [p.model_copy(update={"step": None}) for p in report.metrics["loss"]]}}
    )

    # When their metrics charts are drawn
    by_step, by_time = svg(metrics_figure, report, "m"), svg(metrics_figure, stepless, "m")

    # Then the first runs along the training step, with where each attempt resumed; the second along time
    assert by_step is not None
    assert by_time is not None
    assert ">training step</text>" in by_step
    assert ">resumed from</text>" in by_step
    assert ">hours since submission</text>" in by_time
    assert ">training step</text>" not in by_time

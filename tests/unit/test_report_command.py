"""`spotrun report`: the job and its telemetry through the API, the page and the PNG written where asked."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from typer.testing import CliRunner

from spotrun.cli import report as report_package
from spotrun.cli.app import app
from spotrun.cli.client import ApiError
from spotrun.cli.report import command
from spotrun.control.views.job_json import job_record
from tests.unit.report_world import JOB_ID, interrupted_job, telemetry

runner = CliRunner()


class FakeClient:
    """The API's answers for the job of :mod:`tests.unit.report_world`."""

    def __init__(self, telemetry_error: ApiError | None = None) -> None:
        self.telemetry_error = telemetry_error
        self.asked: list[str] = []

    def list_jobs(self, **_: Any) -> dict[str, Any]:
        return {"jobs": [{"job_id": JOB_ID}]}

    def get_job(self, job_id: str) -> dict[str, Any]:
        self.asked.append(f"job {job_id}")
        if job_id != JOB_ID:
            raise ApiError(404, f"no job with id {job_id!r}")
        return job_record(interrupted_job())

    def telemetry(self, job_id: str) -> dict[str, Any]:
        self.asked.append(f"telemetry {job_id}")
        if self.telemetry_error is not None:
            raise self.telemetry_error
        return {"job_id": job_id, "parts": 5, **telemetry().model_dump(mode="json")}


@pytest.fixture
def client(monkeypatch) -> FakeClient:
    fake = FakeClient()

    @contextmanager
    def api_client(target: Any) -> Iterator[FakeClient]:
        yield fake

    monkeypatch.setattr(command, "api_client", api_client)
    return fake


def test_report_writes_the_page_and_the_png_where_asked(client, tmp_path):
    # When a user asks for the job's report with both paths
    html, png = tmp_path / "out" / "job.html", tmp_path / "charts" / "job.png"
    result = runner.invoke(app, ["report", JOB_ID, "-o", str(html), "--png", str(png), "--json"])

    # Then both files are written, from the job and its telemetry, and the answer says what is in them
    assert result.exit_code == 0, result.output
    assert client.asked == [f"job {JOB_ID}", f"telemetry {JOB_ID}"]
    answer = json.loads(result.stdout)
    cost = interrupted_job().cost
    assert cost is not None
    assert answer == {
        "job_id": JOB_ID,
        "html": str(html),
        "png": str(png),
        "attempts": 5,
        "zones": ["us-east-1a", "us-east-1b", "us-east-1c"],
        "cost_usd": cost.usd,
    }
    page = html.read_text(encoding="utf-8")
    assert 'data-attempts="5"' in page
    assert '<tr data-metric="loss">' in page
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_defaults_to_the_latest_job_and_names_the_files_after_it(client, tmp_path, monkeypatch):
    # Given a working directory
    monkeypatch.chdir(tmp_path)

    # When the report is asked with no id and no paths
    result = runner.invoke(app, ["report"])

    # Then the latest job's report is <id>.html beside <id>.png, and the line says where and what
    assert result.exit_code == 0, result.output
    assert (tmp_path / f"{JOB_ID}.html").is_file()
    assert (tmp_path / f"{JOB_ID}.png").is_file()
    assert f"report of {JOB_ID} (SUCCEEDED, 5 attempts in 3 zones, $" in result.stdout


def test_a_stack_without_the_telemetry_route_still_gets_a_report_that_says_so(monkeypatch, tmp_path):
    # Given an API that answers 404 for the telemetry of a job it knows (deployed before the route)
    fake = FakeClient(telemetry_error=ApiError(404, "Not found"))

    @contextmanager
    def api_client(target: Any) -> Iterator[FakeClient]:
        yield fake

    monkeypatch.setattr(command, "api_client", api_client)

    # When the report is asked
    html = tmp_path / "r.html"
    result = runner.invoke(app, ["report", JOB_ID, "-o", str(html)])

    # Then it is written, and both the command and the page say the telemetry is missing and why
    assert result.exit_code == 0, result.output
    assert "warning: no telemetry: Not found (HTTP 404" in result.stderr
    assert "The job's telemetry could not be read: Not found" in html.read_text(encoding="utf-8")


def test_another_telemetry_error_fails_the_command(monkeypatch, tmp_path):
    # Given an API that fails the telemetry call with a server error
    fake = FakeClient(telemetry_error=ApiError(502, "Bad gateway"))

    @contextmanager
    def api_client(target: Any) -> Iterator[FakeClient]:
        try:
            yield fake
        except ApiError as exc:
            raise command.fail(exc.message) from None

    monkeypatch.setattr(command, "api_client", api_client)

    # When the report is asked
    result = runner.invoke(app, ["report", JOB_ID, "-o", str(tmp_path / "r.html")])

    # Then no report is written and the error is said
    assert result.exit_code == 1
    assert "Bad gateway" in result.stderr
    assert not (tmp_path / "r.html").exists()


def test_without_matplotlib_the_command_says_what_to_install(client, monkeypatch, tmp_path):
    # Given an environment where matplotlib is not installed
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "matplotlib" else real(name, *args)

    monkeypatch.setattr(report_package.importlib.util, "find_spec", find_spec)

    # When the report is asked
    result = runner.invoke(app, ["report", JOB_ID, "-o", str(tmp_path / "r.html")])

    # Then it fails before asking the API, naming the missing library and the extra to install
    assert result.exit_code == 1
    assert "missing: matplotlib: pip install 'spotrun[report]'" in result.stderr
    assert client.asked == []
    assert not (tmp_path / "r.html").exists()

"""The dashboard's pages over a client of canned API answers: figures, live parts, errors, read-only, hosts."""

from __future__ import annotations

import hashlib
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from spotrun.cli.client import ApiError
from spotrun.cli.dashboard import app as dashboard_app
from spotrun.cli.dashboard.app import CONTENT_SECURITY_POLICY, create_app

RUNNING_ID = "job-20261207-running"
ENDED_ID = "job-20261207-ended"


def listed(job_id: str, status: str, **figures: Any) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "name": "tiny-regression",
        "status": status,
        "created_at": "2026-12-07T10:00:00+00:00",
        "instance_type": "g5.xlarge",
        "lifecycle": "spot",
        "recoveries": 0,
        "cost_usd": 0.0,
        "duration_seconds": 0.0,
        **figures,
    }


class CannedClient:
    """Answers as the REST API would, from dictionaries; an :class:`ApiError` in place of an answer is raised."""

    base_url = "http://api.example"

    def __init__(self) -> None:
        self.jobs: dict[str, Any] | ApiError = {
            "jobs": [
                listed(RUNNING_ID, "TRAINING", recoveries=2, cost_usd=0.01234, duration_seconds=185.0),
                listed(ENDED_ID, "FAILED", error_type="Budget.Exceeded"),
            ],
            "next_token": None,
        }
        self.views: dict[str, dict[str, Any]] = {
            RUNNING_ID: {"job_id": RUNNING_ID, "name": "tiny-regression", "status": "TRAINING"},
            ENDED_ID: {"job_id": ENDED_ID, "name": "tiny-regression", "status": "FAILED"},
        }
        self.telemetry_answer: dict[str, Any] | ApiError = {"metrics": {}, "gpu": []}
        self.schedules: dict[str, Any] = {
            "schedules": [
                {
                    "name": "nightly",
                    "expression": "cron(0 3 * * ? *)",
                    "timezone": "UTC",
                    "state": "ENABLED",
                    "next_run": "2026-12-08T03:00:00+00:00",
                }
            ]
        }
        self.runs: dict[str, Any] = {
            "runs": [
                {
                    "schedule": "nightly",
                    "scheduled_time": "2026-12-07T03:00:00Z",
                    "recorded_at": "2026-12-07T03:00:01+00:00",
                    "outcome": "started",
                    "job_id": ENDED_ID,
                },
                {
                    "schedule": "nightly",
                    "scheduled_time": "2026-12-06T03:00:00Z",
                    "recorded_at": "2026-12-06T03:00:01+00:00",
                    "outcome": "skipped",
                    "reason": "no input changed since the last successful run",
                },
            ]
        }
        self.asked: list[str] = []

    @staticmethod
    def _give(answer: Any) -> Any:
        if isinstance(answer, ApiError):
            raise answer
        return answer

    def list_jobs(self, status=None, name=None, limit=None, next_token=None) -> dict[str, Any]:
        self.asked.append(f"list_jobs status={status} limit={limit}")
        return self._give(self.jobs)

    def get_job(self, job_id: str) -> dict[str, Any]:
        if job_id not in self.views:
            raise ApiError(404, f"no job {job_id}")
        return self.views[job_id]

    def telemetry(self, job_id: str) -> dict[str, Any]:
        return self._give(self.telemetry_answer)

    def list_schedules(self) -> dict[str, Any]:
        return self.schedules

    def schedule_runs(self, name: str) -> dict[str, Any]:
        self.asked.append(f"runs {name}")
        return self.runs


@pytest.fixture
def reports(monkeypatch) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The report's renderer, stood in for: what it was given, and a fragment naming the job's status."""
    given: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def stand_in(view: dict[str, Any], telemetry: dict[str, Any], now: datetime) -> str:
        given.append((view, telemetry))
        return f'<div class="stand-in">report of {view["job_id"]}: {view["status"]}</div>'

    monkeypatch.setattr(dashboard_app, "report_html", stand_in)
    return given


@pytest.fixture
def api() -> CannedClient:
    return CannedClient()


@pytest.fixture
def browser(api):
    return create_app(api).test_client()


def text(response) -> str:
    return response.get_data(as_text=True)


def test_the_job_list_shows_each_jobs_figures_and_links_its_page(browser):
    # When the job list is asked for
    answer = browser.get("/")

    # Then each job's row has spotrun list's figures, formatted as it formats them
    assert answer.status_code == 200
    page = text(answer)
    row = re.search(rf'<tr data-job-id="{RUNNING_ID}" data-status="TRAINING">(.*?)</tr>', page, re.S)
    assert row, page
    cells = [
        re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row[1], re.S)
    ]
    assert cells == [
        RUNNING_ID,
        "tiny-regression",
        "TRAINING",
        "g5.xlarge",
        "spot",
        "2",
        "$0.0123",
        "3 min 05 s",
        "2026-12-07 10:00:00",
    ]
    assert f'href="/jobs/{RUNNING_ID}"' in row[1]
    # And a failed job says why
    assert "FAILED (Budget.Exceeded)" in page


def test_the_job_list_refreshes_itself_from_its_fragment(browser):
    # When the page and its fragment are asked for
    page = text(browser.get("/?status=TRAINING"))
    fragment = browser.get("/fragments/jobs?status=TRAINING")

    # Then the page's live part polls the fragment, which replaces it with a part that polls again
    assert 'hx-get="/fragments/jobs?status=TRAINING"' in page
    assert 'hx-trigger="every 3s"' in page
    assert fragment.status_code == 200
    assert text(fragment).startswith('<section id="jobs"')
    assert 'hx-trigger="every 3s"' in text(fragment)
    assert "<html" not in text(fragment)
    # And the page loads htmx from the dashboard itself, nothing from elsewhere
    assert re.findall(r'<script src="([^"]+)"', page) == ["/static/htmx.min.js"]
    assert "://" not in "".join(re.findall(r'(?:src|href)="([^"]+)"', page))


def test_the_status_filter_is_passed_to_the_api_and_an_unknown_status_is_refused(api, browser):
    # When the list is filtered by a status, then by a status that does not exist
    browser.get("/?status=SUCCEEDED")
    refused = browser.get("/?status=DONE")

    # Then the API is asked for that status only, and the unknown one is refused
    assert api.asked[0] == "list_jobs status=SUCCEEDED limit=50"
    assert refused.status_code == 400
    assert len(api.asked) == 1


def test_an_unreachable_api_is_said_by_the_page_and_its_fragment_keeps_polling(api, browser):
    # Given an API that does not answer
    api.jobs = ApiError(0, "the API at http://api.example does not answer: Connection refused")

    # When the page and its fragment are asked for
    page = browser.get("/")
    fragment = browser.get("/fragments/jobs")

    # Then the page fails with the reason (502), and the fragment shows it while it polls on
    assert page.status_code == 502
    assert "does not answer: Connection refused" in text(page)
    assert fragment.status_code == 200  # htmx swaps in successful answers only
    assert "does not answer: Connection refused" in text(fragment)
    assert "hx-trigger" in text(fragment)


def test_a_running_jobs_page_polls_its_report_and_an_ended_ones_does_not(browser, reports):
    # When a running job's page, its fragment and an ended job's page are asked for
    running = text(browser.get(f"/jobs/{RUNNING_ID}"))
    fragment = text(browser.get(f"/fragments/jobs/{RUNNING_ID}"))
    ended = text(browser.get(f"/jobs/{ENDED_ID}"))

    # Then each shows the report's body of its job
    assert f"report of {RUNNING_ID}: TRAINING" in running
    assert f"report of {ENDED_ID}: FAILED" in ended
    # And the running one's report part polls its fragment, which polls again; the ended one's stays
    assert f'hx-get="/fragments/jobs/{RUNNING_ID}"' in running
    assert 'hx-trigger="every 5s"' in fragment
    assert "hx-trigger" not in ended
    assert "the job has ended" in ended
    # And the report was built from the job view and its telemetry
    assert reports[0][0]["job_id"] == RUNNING_ID
    assert reports[0][1] == {"metrics": {}, "gpu": []}


def test_a_job_without_telemetry_still_shows_its_report_and_says_what_is_missing(api, browser, reports):
    # Given an API whose telemetry route refuses
    api.telemetry_answer = ApiError(403, "Missing Authentication Token")

    # When the job's page is asked for
    page = text(browser.get(f"/jobs/{ENDED_ID}"))

    # Then the report is there, from the record alone, and the page says why the charts are empty
    assert f"report of {ENDED_ID}" in page
    assert reports[0][1] == {}
    assert "the telemetry was not answered: Missing Authentication Token (HTTP 403)" in page


def test_an_unknown_job_is_not_found(browser, reports):
    # When a job the API does not know is asked for
    answer = browser.get("/jobs/job-unknown")

    # Then the page is a 404 saying so, and no report was built
    assert answer.status_code == 404
    assert "no job job-unknown" in text(answer)
    assert reports == []


def test_the_schedules_page_shows_each_schedule_and_its_runs(api, browser):
    # When the schedules page is asked for
    page = text(browser.get("/schedules"))

    # Then the schedule is shown with its expression and next run, and its runs with their jobs
    assert 'data-schedule="nightly"' in page
    assert "cron(0 3 * * ? *)" in page
    assert "2026-12-08T03:00:00+00:00" in page
    assert f'<a href="/jobs/{ENDED_ID}">{ENDED_ID}</a>' in page
    assert "no input changed since the last successful run" in page
    assert page.count('data-outcome="') == 2
    assert "runs nightly" in api.asked
    # And it refreshes itself too
    assert 'hx-get="/fragments/schedules"' in page


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_every_route_refuses_anything_but_reading(api, browser, method):
    # Given every route of the app, with a value for each of its variables
    rules = list(create_app(api).url_map.iter_rules())
    paths = [
        re.sub(r"<(?:[^:>]+:)?([^>]+)>", lambda m: "htmx.min.js" if m[1] == "filename" else "x", r.rule)
        for r in rules
    ]
    assert "/" in paths
    assert "/jobs/x" in paths

    # When each is sent a request that would change something
    answers = {path: browser.open(path, method=method).status_code for path in paths}

    # Then each refuses it (405), naming the methods it answers, and saying why in the page
    assert set(answers.values()) == {405}, answers
    refused = browser.open("/", method=method)
    assert set(refused.headers["Allow"].split(", ")) == {"GET", "HEAD", "OPTIONS"}
    assert "The dashboard is read-only" in text(refused)


def test_a_request_naming_another_host_is_refused(browser):
    # When the dashboard is asked under the loopback names, then under another name (a DNS name rebound to 127.0.0.1)
    local = browser.get("/", headers={"Host": "127.0.0.1:8050"})
    named = browser.get("/", headers={"Host": "localhost:8050"})
    other = browser.get("/", headers={"Host": "attacker.example:8050"})

    # Then only the loopback names are served
    assert (local.status_code, named.status_code) == (200, 200)
    assert other.status_code == 400


def test_every_answer_forbids_loading_anything_from_elsewhere(browser):
    # When a page and the vendored script are asked for
    page = browser.get("/")
    script = browser.get("/static/htmx.min.js")

    # Then both carry the policy that allows the dashboard's own files only, and the page is never cached
    assert page.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY
    assert page.headers["Cache-Control"] == "no-store"
    assert script.status_code == 200
    assert b"htmx" in script.get_data()
    script.close()


def test_a_running_jobs_page_slow_to_draw_refreshes_less_often(api, monkeypatch):
    # Given a report that takes 0.3 s to draw, and a job page meant to refresh every 0.5 s
    def slow(view: dict[str, Any], telemetry: dict[str, Any], now: datetime) -> str:
        time.sleep(0.3)
        return "<div>report</div>"

    monkeypatch.setattr(dashboard_app, "report_html", slow)
    browser = create_app(api, job_refresh_seconds=0.5).test_client()

    # When the running job's page is asked for
    page = text(browser.get(f"/fragments/jobs/{RUNNING_ID}"))

    # Then it asks again only after four times its drawing, rounded up to whole seconds
    assert 'hx-trigger="every 2s"' in page


def test_the_vendored_htmx_is_the_published_file_with_its_license():
    # Then the script served is byte for byte the npm package's, and its license travels with it
    static = Path(dashboard_app.__file__).parent / "static"
    assert hashlib.sha256((static / "htmx.min.js").read_bytes()).hexdigest() == dashboard_app.HTMX_SHA256
    assert "Zero-Clause BSD" in (static / "htmx.LICENSE.txt").read_text()

"""The dashboard in a real headless browser (Debian's Chromium, driven by Playwright) against the emulator.

The emulator runs as ``spotrun local up`` runs it (its REST API and chaos control API), the dashboard is served
beside it as ``local up`` serves it, and the browser is left alone while jobs run: every change it shows comes
from the page refreshing itself. A screenshot of each page goes to ``test-output/dashboard/``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from spotrun.cli.client import SpotrunClient
from spotrun.cli.dashboard.command import serving_beside
from spotrun.cli.display.summary import duration
from spotrun.cli.target import local_api_client
from spotrun.local.chaos.injector import Injector
from spotrun.local.chaos.plan import InterruptionSchedule
from spotrun.local.control_client import ControlClient
from spotrun.local.demo import drop_manifest, job_progress, upload_example, wait_for_job
from spotrun.local.runtime import LocalRuntime
from spotrun.local.up import local_up
from spotrun.model.job.record import JobStatus
from spotrun.model.manifest.parse import parse_manifest_text
from spotrun.shape import REPO_ROOT
from tests.e2e.conftest import E2E_TIME_SCALE, example_manifest, wait_for_record

CHROMIUM = Path("/usr/bin/chromium")
# Debian's Chromium, headless, with nothing of its own reaching the network (no update checks, no sync, no QUIC).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
SCREENSHOTS = REPO_ROOT / "test-output" / "dashboard"
# The list refreshes every 3 s and a job's page every 5 s: a change shows within one period, plus a loaded
# machine's slack.
SEEN_WITHIN_MS = 30_000
JOB_TIMEOUT = 240.0
STRIKE_STEP = 100


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> Iterator[tuple[LocalRuntime, ControlClient, SpotrunClient, str]]:
    """``spotrun local up``'s runtime, its chaos client, its REST API's client, and its dashboard's URL."""
    with local_up(tmp_path_factory.mktemp("local"), E2E_TIME_SCALE) as (runtime, state):
        upload_example(runtime)
        client = local_api_client(state.api_url or "", state.settings.region)
        with serving_beside(client, 0) as server:
            assert server is not None
            yield runtime, ControlClient(state), client, server.url


def missing_chromium() -> str | None:
    """Why the browser tests cannot run, or None. Never a skip: CI must run them."""
    if CHROMIUM.exists():
        return None
    return (
        f"{CHROMIUM} is missing: the dashboard's browser tests drive Debian's Chromium, which `make test` "
        "installs (apt-get install chromium, as root); run `make chromium`"
    )


def test_the_browser_is_debians_chromium():
    # Then the browser the other tests drive is installed (a failure, not a skip, when it is not)
    assert missing_chromium() is None, missing_chromium()


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory):
    """A headless Chromium with a fresh profile; never a browser downloaded by Playwright."""
    if missing_chromium():
        pytest.fail(missing_chromium())
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1360, "height": 900},
        )
        yield context
        context.close()


@contextmanager
def watched_tab(browser_context, url: str) -> Iterator:
    """A tab that counts its navigations (a page that updates by itself never navigates again), and that ends
    the test failing if it asked anything of another origin than the dashboard's, or logged an error (a script
    or style the page's Content-Security-Policy blocked, a failed refresh)."""
    tab = browser_context.new_page()
    tab.navigations = []  # type: ignore[attr-defined]
    elsewhere: list[str] = []
    errors: list[str] = []
    tab.on("framenavigated", lambda frame: frame.parent_frame is None and tab.navigations.append(frame.url))
    tab.on("request", lambda request: request.url.startswith(url) or elsewhere.append(request.url))
    tab.on("console", lambda message: message.type == "error" and errors.append(message.text))
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    tab.close()
    assert not elsewhere, f"the dashboard asked for something elsewhere: {elsewhere}"
    assert not errors, f"the browser logged errors: {errors}"


@pytest.fixture
def page(browser_context, local):
    """A watched tab of the dashboard."""
    with watched_tab(browser_context, local[3]) as tab:
        yield tab


@pytest.fixture
def other_page(browser_context, local):
    """A second watched tab, open beside ``page``."""
    with watched_tab(browser_context, local[3]) as tab:
        yield tab


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, f"{path}: an empty picture"
    return path


def job_manifest(name: str, steps: int, step_seconds: float) -> bytes:
    return example_manifest(
        **{
            "name: tiny-regression": f"name: {name}",
            '--step-seconds, "0.02"]': f'--step-seconds, "{step_seconds}", --steps, "{steps}"]',
        }
    )


def test_the_schedules_page_shows_a_schedule_and_each_run_as_it_fires(local, page):
    runtime, _, client, url = local
    # Given a daily schedule whose runs skip unchanged inputs, and its page open in the browser
    document = parse_manifest_text(job_manifest("dashboard-nightly", 30, 0.02)).model_dump(
        mode="json", exclude_none=True
    )
    document["schedule"] = {"expression": "cron(0 3 * * ? *)", "only_if_data_changed": True}
    client.create_schedule(document)
    try:
        page.goto(url + "schedules")
        schedule = page.locator('article[data-schedule="dashboard-nightly"]')
        assert "cron(0 3 * * ? *)" in schedule.inner_text()
        assert "Not fired yet" in schedule.inner_text()

        # When it fires, and fires again once its job succeeded
        runtime.fire_schedule("dashboard-nightly")
        started = schedule.locator('tr[data-outcome="started"]')
        started.wait_for(timeout=SEEN_WITHIN_MS)
        job_id = started.locator("a").inner_text()
        assert wait_for_job(runtime, job_id, timeout=JOB_TIMEOUT).status is JobStatus.SUCCEEDED
        runtime.fire_schedule("dashboard-nightly")

        # Then each run shows up by itself: the job it started, linked to its page, then the skip and its reason
        skipped = schedule.locator('tr[data-outcome="skipped"]')
        skipped.wait_for(timeout=SEEN_WITHIN_MS)
        assert "inputs unchanged" in skipped.inner_text()
        assert started.locator("a").get_attribute("href") == f"/jobs/{job_id}"
        assert page.navigations == [url + "schedules"]  # type: ignore[attr-defined]
        screenshot(page, "schedules")
    finally:
        client.delete_schedule("dashboard-nightly")


def test_the_job_list_and_the_job_page_follow_an_interrupted_job_to_its_end_by_themselves(
    local, page, other_page
):
    runtime, control, client, url = local
    # Given the job list open in the browser, before the job exists
    page.goto(url)
    page.evaluate("window.loadedOnce = true")
    assert page.locator("h1").inner_text() == "Jobs"

    # When a job is submitted (30 s of training: its second attempt trains long enough to be seen by a page that
    # refreshes every 5 s or more on a loaded machine)
    submitted = drop_manifest(
        runtime, job_manifest("dashboard-interrupted", 600, 0.05), "dashboard-interrupted.yaml"
    )
    job_id = submitted.job_id
    row = page.locator(f'tr[data-job-id="{job_id}"]')

    # Then its row appears in the list while it trains
    row.and_(page.locator('[data-status="TRAINING"]')).wait_for(timeout=SEEN_WITHIN_MS)
    running = row.locator("td").all_inner_texts()
    assert running[1:3] == ["dashboard-interrupted", "TRAINING"]
    assert re.fullmatch(r"\$\d+\.\d{4}", running[6]), running
    screenshot(page, "jobs-running")

    # Given its page open in another tab
    wait_for_record(client, job_id)
    other_page.goto(f"{url}jobs/{job_id}")
    report = other_page.locator(f'article.spotrun-report[data-job-id="{job_id}"]')
    report.wait_for(timeout=SEEN_WITHIN_MS)
    assert other_page.locator("section#job").get_attribute("hx-trigger"), (
        "a running job's page does not refresh"
    )

    # When its instance is reclaimed mid-training through the chaos API (a spot interruption with its notice)
    injector = Injector(
        InterruptionSchedule([STRIKE_STEP]),
        job_progress(runtime, job_id),
        lambda instance: control.interrupt(instance),
    )
    with injector:
        # Then, while the second attempt runs, the page shows both attempts, the first ended by the interruption
        other_page.locator('article.spotrun-report[data-attempts="2"][data-status="TRAINING"]').wait_for(
            timeout=JOB_TIMEOUT * 1000
        )
        assert "interruption" in (report.locator('tr[data-attempt="1"]').get_attribute("class") or "")
        assert "running" in report.locator('tr[data-attempt="2"]').inner_text()
        screenshot(other_page, "job-running")
        job = wait_for_job(runtime, job_id, timeout=JOB_TIMEOUT)
    assert not injector.schedule.pending, "the interruption was never injected"
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert [attempt.end_reason for attempt in job.attempts] == ["interrupted", "completed"]

    # And, the job ended, its page shows its end and every attempt where each ran, then stops refreshing
    ended = other_page.locator(
        f'article.spotrun-report[data-status="SUCCEEDED"][data-attempts="{len(job.attempts)}"]'
    )
    ended.wait_for(timeout=SEEN_WITHIN_MS)
    for attempt in job.attempts:
        attempt_row = report.locator(f'tr[data-attempt="{attempt.number}"]').inner_text()
        assert attempt.instance_type in attempt_row, attempt_row
        assert attempt.availability_zone in attempt_row, attempt_row
    assert other_page.locator("section#job").get_attribute("hx-trigger") is None
    assert other_page.navigations == [f"{url}jobs/{job_id}"]  # type: ignore[attr-defined]
    screenshot(other_page, "job-ended")

    # And the list, never reloaded, shows its end and its recovery with spotrun list's figures
    row.and_(page.locator('[data-status="SUCCEEDED"]')).wait_for(timeout=SEEN_WITHIN_MS)
    listed = client.list_jobs(name="dashboard-interrupted")["jobs"][0]
    shown = row.locator("td").all_inner_texts()
    assert shown[2:6] == ["SUCCEEDED", listed["instance_type"], listed["lifecycle"], "1"]  # 1 recovery
    assert shown[6] == f"${listed['cost_usd']:.4f}"
    assert shown[7] == duration(listed["duration_seconds"])
    assert page.evaluate("window.loadedOnce") is True
    assert page.navigations == [url]  # type: ignore[attr-defined]
    screenshot(page, "jobs-ended")
    screenshot(page, "jobs")  # the guide's picture of the list

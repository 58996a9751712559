"""The demo's job interrupted in the emulator, as its user then follows it: the webhook notifications it sent
(on 127.0.0.1) and ``spotrun report``'s page and PNG. One job serves both (its run is most of their cost); a
job of another name, failing beside it, proves the subscription's name prefix."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from spotrun.cli.app import app
from spotrun.cli.target import local_api_client
from spotrun.local.chaos.plan import plan_interruptions
from spotrun.local.control_client import LocalState, write_state
from spotrun.local.demo import drop_manifest, upload_example, wait_for_job
from spotrun.local.runtime import LocalRuntime
from spotrun.model.job.record import Job, JobStatus, utc_now
from spotrun.model.job.telemetry import JobTelemetry
from spotrun.notifications import parse_subscription
from tests.e2e.conftest import E2E_TIME_SCALE, example_manifest, run_with_chaos
from tests.integration.webhook_receiver import Receiver, webhook_receiver

WEBHOOK_PATH = "/services/T000/B000/token"
# As tests/e2e/test_interruptions.py plans them: in the first 60 % of the run, away from its ends.
PLANNED_OVER = 180
MARGIN = 0.15


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with webhook_receiver(WEBHOOK_PATH) as started:
        yield started


@pytest.fixture(scope="module")
def runtime(tmp_path_factory, receiver) -> Iterator[LocalRuntime]:
    # Subscribed as `spotrun local up --notify webhook=URL,events=ended+interrupted,jobs=demo-` subscribes.
    subscription = parse_subscription(f"webhook={receiver.url},events=ended+interrupted,jobs=demo-")
    with LocalRuntime(
        tmp_path_factory.mktemp("runtime"), time_scale=E2E_TIME_SCALE, notifications=[subscription]
    ) as started:
        upload_example(started)
        yield started


@pytest.fixture(scope="module")
def jobs(runtime) -> dict[str, Job]:
    """Side by side: the demo's job, named for the subscription's prefix and interrupted twice by spot warnings
    (each relaunch avoids the pool just reclaimed), and a job of another name whose script exits with an error."""
    quiet = example_manifest(
        **{
            "name: tiny-regression": "name: quiet-regression",
            "command: [python, train.py": "command: [python, -c, 'raise SystemExit(3)'",
        }
    )
    quiet_job = drop_manifest(runtime, quiet, "quiet.yaml")
    steps = plan_interruptions(2, PLANNED_OVER, seed=34, margin=MARGIN)
    manifest = example_manifest(**{"name: tiny-regression": "name: demo-interrupted"})
    demo = run_with_chaos(runtime, manifest, "demo-interrupted.yaml", steps, runtime.interrupt)
    assert demo.status is JobStatus.SUCCEEDED, demo.error
    assert len(demo.attempts) == 3
    return {"demo": demo, "quiet": wait_for_job(runtime, quiet_job.job_id, timeout=60)}


@pytest.fixture(scope="module")
def interrupted_demo_job(jobs) -> Job:
    return jobs["demo"]


def local_state(runtime, where: Path) -> Path:
    """A state file naming the module's emulator, as `spotrun local up` writes one, for the CLI to find it."""
    state = LocalState(
        pid=os.getpid(),
        endpoint_url=runtime.endpoint_url,
        control_url=runtime.endpoint_url,  # the report asks nothing of the chaos API
        api_url=runtime.api_url,
        time_scale=E2E_TIME_SCALE,
        workdir=str(where),
        started_at=utc_now(),
        settings=runtime.settings,
    )
    write_state(where, state)
    return where


def test_the_webhook_hears_each_interruption_then_the_success(interrupted_demo_job, receiver):
    # Given the demo's job, named for the subscription's prefix, interrupted twice and run to its end
    job = interrupted_demo_job

    # Then the webhook heard the interruption of attempts 1 and 2, then the success on attempt 3, nothing else
    texts = receiver.wait_for(lambda got: len(got) >= 3)
    first, second, third = job.attempts
    assert texts == [
        *(
            f"spotrun: Job demo-interrupted ({job.job_id}) INTERRUPTED on attempt {attempt.number} "
            f"({attempt.instance_type} {attempt.lifecycle}, {attempt.availability_zone}); spotrun resumes it "
            "from its last checkpoint"
            for attempt in (first, second)
        ),
        f"spotrun: Job demo-interrupted ({job.job_id}) SUCCEEDED on attempt 3 ({third.instance_type} "
        f"{third.lifecycle}, {third.availability_zone})",
    ]
    assert all(request.path == WEBHOOK_PATH for request in receiver.requests)


def test_report_of_the_interrupted_demo_job(runtime, interrupted_demo_job, tmp_path):
    # Given the demo's job, interrupted twice
    job = interrupted_demo_job
    assert job.cost is not None
    zones = list(dict.fromkeys(attempt.availability_zone for attempt in job.attempts))

    # When a user writes its report with the CLI, against the emulator's REST API
    state_dir = local_state(runtime, tmp_path / "local")
    html, png = tmp_path / "report" / "demo.html", tmp_path / "report" / "demo.png"
    result = CliRunner().invoke(
        app,
        ["report", job.job_id, "-o", str(html), "--png", str(png), "--state-dir", str(state_dir), "--json"],
    )

    # Then the command says what it wrote: three attempts, the job's zones, its cost
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert (answer["attempts"], answer["zones"], answer["cost_usd"]) == (3, zones, job.cost.usd)
    # And the page counts the attempts, lists each one with its zone, and states the cost and the saving
    page = html.read_text(encoding="utf-8")
    assert 'data-attempts="3"' in page
    assert f'data-zones="{" ".join(zones)}"' in page
    # (a standby never used has a row too, class "unused": not an attempt)
    zone_cell = (
        r'<tr class="(?![^"]*unused)[^"]*" data-attempt="(\d)">.*?<td[^>]*>([a-z]{2}-[a-z]+-\d[a-z])</td>'
    )
    rows = re.findall(zone_cell, page, flags=re.DOTALL)
    assert rows == [(str(a.number), a.availability_zone) for a in job.attempts]
    assert f"<dt>cost</dt><dd>${job.cost.usd:.4f}</dd>" in page
    assert f"{job.cost.savings_pct:.1f} %" in page
    assert page.count("interrupted by EC2 after its warning at step") == 2
    # And the training metrics the demo's script reported are charted and summed up, as the API serves them
    client = local_api_client(str(runtime.api_url), runtime.settings.region)
    served = JobTelemetry.model_validate(client.telemetry(job.job_id))
    assert served.metrics, "the demo's script reported no metrics"
    for name, points in served.metrics.items():
        assert f'<tr data-metric="{name}">' in page
        assert f">{name}</text>" in page  # its panel's axis label, in the metrics chart
        assert f'<td class="num">{len(points)}</td>' in page.split(f'<tr data-metric="{name}">')[1]
    # And the per-step series runs across the interruptions: a line per attempt that reported it
    longest = max(served.metrics.values(), key=len)
    reported = sorted({point.attempt for point in longest})
    assert len(reported) >= 2, f"the per-step metric was reported by attempts {reported} only"
    for number in reported:
        assert f">attempt {number}</text>" in page
    # And nothing in it is fetched from anywhere
    assert "http://" not in page
    assert "https://" not in page
    # And the PNG is the main chart, a valid picture of a README's size
    with Image.open(png) as image:
        assert image.format == "PNG"
        width, height = image.size
    assert 1000 <= width <= 2000
    assert 600 <= height <= 1400


def test_a_job_outside_the_prefix_notifies_no_one(jobs, receiver):
    # Given a job of another name that failed (its script exits with an error) while the demo's job ran
    quiet, demo = jobs["quiet"], jobs["demo"]
    assert quiet.status is JobStatus.FAILED
    # (ended seconds before the demo's job: a delivery takes milliseconds here, so any would have arrived)
    assert quiet.updated_at < demo.updated_at - timedelta(seconds=2), (quiet.updated_at, demo.updated_at)

    # Then the webhook heard nothing of it, only the demo's job
    texts = receiver.wait_for(lambda got: len(got) >= 3)
    assert not [text for text in texts if quiet.job_id in text or "quiet-regression" in text], texts
    assert all(demo.job_id in text for text in texts), texts

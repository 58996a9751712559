"""Live logs end to end: ``logs --follow`` streams a running job's lines, and keeps those of a killed instance."""

from __future__ import annotations

import re
import threading
import time

from spotrun.agent.supervision.log_shipper import DEFAULT_INTERVAL_SECONDS
from spotrun.cli.logs import LogFollower, follow
from spotrun.local.chaos.injector import Injector
from spotrun.local.chaos.plan import InterruptionSchedule
from spotrun.local.demo import drop_manifest, job_progress, wait_for_job
from spotrun.model.job.record import JobStatus
from spotrun.model.layout import log_key
from tests.e2e.conftest import example_manifest, wait_for_record
from tests.sigv4 import local_client

STRIKE_STEP = 150
# The example prints a line at each checkpoint: every 25 steps of 0.02 s, two lines a second.
INTERVAL = 25
_STEP = re.compile(r"^step (\d+) loss")
# A kill loses what the live shipper had not shipped yet: at most its interval (DEFAULT_INTERVAL_SECONDS, 1 s)
# of output, plus 1 s for a put in flight and the shipper's thread being scheduled late: 2 s of 0.02-s steps.
LOST_STEPS_AT_MOST = round((DEFAULT_INTERVAL_SECONDS + 1.0) / 0.02)


def _steps(lines: list[str]) -> list[int]:
    return [int(match[1]) for line in lines if (match := _STEP.match(line))]


def test_follow_streams_a_running_jobs_lines_and_keeps_those_of_an_instance_killed_without_notice(runtime):
    # Given a job followed from its start, as `spotrun logs --follow` does
    manifest = example_manifest(
        **{
            "name: tiny-regression": "name: live-logs",
            "interval_steps: 50": f"interval_steps: {INTERVAL}",
            '--step-seconds, "0.02"]': '--step-seconds, "0.02", --steps, "300"]',
        }
    )
    client = local_client(runtime.api_url or "")
    printed: list[str] = []
    exit_codes: list[int] = []
    seen_while_running: list[int] = []
    printed_at_kill: list[int] = []

    def strike(instance_id: str) -> None:
        # When its instance is killed without notice mid-training, once its lines stream (a few seconds at most)
        deadline = time.monotonic() + 10
        while not _steps(printed) and time.monotonic() < deadline:
            time.sleep(0.1)
        seen_while_running.extend(_steps(printed))
        gone = runtime.kill(instance_id)
        # What the command had printed when it died: its log on the instance's disk, read once it is dead
        if gone.wait(30):
            for local_log in runtime.instance(instance_id).directory.rglob("attempt-001.log"):
                printed_at_kill.extend(_steps(local_log.read_text().splitlines()))

    submitted = drop_manifest(runtime, manifest, "live-logs.yaml")
    job_id = submitted.job_id
    wait_for_record(client, job_id)
    follower = LogFollower(client, job_id)
    thread = threading.Thread(
        target=lambda: exit_codes.append(follow(client, follower, poll_seconds=0.2, emit=printed.append)),
        daemon=True,
    )
    thread.start()
    injector = Injector(InterruptionSchedule([STRIKE_STEP]), job_progress(runtime, job_id), strike)
    with injector:
        job = wait_for_job(runtime, job_id, timeout=240)
    thread.join(timeout=30)

    # Then lines streamed while the first attempt ran, before the job ended
    assert job.status is JobStatus.SUCCEEDED, job.error
    assert seen_while_running, "no line streamed while the attempt ran"
    # And the killed attempt uploaded no log, yet its lines up to a few seconds before the kill are kept
    first, _ = job.attempts
    assert first.end_reason == "instance-lost"
    s3 = runtime.client("s3")
    assert "Contents" not in s3.list_objects_v2(
        Bucket=runtime.settings.jobs_bucket, Prefix=log_key(job_id, 1)
    )
    kept = client.logs(job_id, attempt=1)["logs"][0]
    assert kept["source"] == "live"
    # measured from the kill: what the command had printed when it died, less what the live log kept
    assert printed_at_kill, "the killed attempt's processes never died, or its log on its disk was empty"
    assert max(printed_at_kill) >= STRIKE_STEP
    lost_steps = max(printed_at_kill) - max(_steps(kept["lines"]))
    assert 0 <= lost_steps <= LOST_STEPS_AT_MOST, (max(printed_at_kill), max(_steps(kept["lines"])))
    # And the follower went on to attempt 2 under its header, and ended with the job's exit code
    first_header = f"== attempt 1: {job_id}/attempt-001 (live)"
    second_header = f"== attempt 2: {job_id}/attempt-002 (live)"
    assert printed.index(first_header) < printed.index(second_header)
    assert any(line.startswith("resumed from step") for line in printed[printed.index(second_header) :])
    assert exit_codes == [0]

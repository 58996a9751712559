"""training.setup end to end in the emulator: its output in the job's logs, and a failure ending the job."""

from __future__ import annotations

import json
import urllib.request

from spotrun.local.demo import drop_manifest, wait_for_job
from spotrun.model.job.record import JobStatus
from tests.e2e.conftest import assert_nothing_left_running, example_manifest
from tests.sigv4 import signed_request

JOB_TIMEOUT = 120
COMMAND = 'command: [python, train.py, --step-seconds, "0.02"]'
# A short run: the example's 20 first steps, checkpointed as usual.
SHORT = 'command: [python, train.py, --steps, "20"]'


def with_setup(name: str, setup: str) -> bytes:
    return example_manifest(
        **{
            "name: tiny-regression": f"name: {name}",
            COMMAND: f"{SHORT}\n  setup: {setup}",
            "restarts_on_error: 1": "restarts_on_error: 0",
        }
    )


def test_setup_output_shows_in_the_logs_and_a_failing_setup_ends_the_job(runtime):
    # Given two jobs: one whose setup prints a line, one whose setup exits 4 after printing why
    printing = with_setup("setup-prints", "[[python, -c, \"print('setup: requirements installed')\"]]")
    failing = with_setup(
        "setup-fails",
        "[[python, -c, \"print('ERROR: no matching distribution for torch==9'); import sys; sys.exit(4)\"]]",
    )

    # When both are dropped (they run side by side)
    ok = drop_manifest(runtime, printing, "setup-prints.yaml")
    bad = drop_manifest(runtime, failing, "setup-fails.yaml")
    succeeded = wait_for_job(runtime, ok.job_id, timeout=JOB_TIMEOUT)
    failed = wait_for_job(runtime, bad.job_id, timeout=JOB_TIMEOUT)

    # Then the first trained after its setup: the logs (GET /jobs/{id}/logs, what `spotrun logs` shows) hold the
    # setup's line before the training's, and the timeline says how long setup took
    assert succeeded.status is JobStatus.SUCCEEDED, succeeded.error
    request = signed_request(f"{runtime.api_url}/jobs/{ok.job_id}/logs?tail=500")
    with urllib.request.urlopen(request) as answer:  # noqa: S310 - the emulator's http URL
        [log] = json.load(answer)["logs"]
    text = "\n".join(log["lines"])
    assert text.index("setup: requirements installed") < text.index("run 1 of at most 1")
    [attempt] = succeeded.attempts
    assert attempt.setup_seconds is not None
    assert attempt.setup_seconds > 0
    [training] = [change for change in succeeded.timeline if change.status is JobStatus.TRAINING]
    assert f"{attempt.instance_id}: setup took " in (training.detail or "")
    # And the second ended Setup.Failed naming the command and its exit code, with the output's tail, on its one
    # instance (not retried elsewhere), which was released
    assert failed.status is JobStatus.FAILED
    assert failed.error is not None
    assert failed.error.type == "Setup.Failed"
    assert failed.error.exit_code == 4
    assert "setup command 1 of 1" in failed.error.message
    assert "exit code 4" in failed.error.message
    assert "no matching distribution for torch==9" in (failed.error.log_tail or "")
    assert [change.status for change in failed.timeline][-2:] == [JobStatus.STAGING, JobStatus.FAILED]
    assert len(failed.attempts) == 1
    assert_nothing_left_running(runtime, failed)

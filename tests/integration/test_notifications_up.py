"""`spotrun local up --notify`: a user's subscriptions, without code, in the long-running emulator."""

from __future__ import annotations

import email
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import boto3
from typer.testing import CliRunner

from spotrun.cli.app import app
from spotrun.local.control_client import read_state
from spotrun.model.job.bus_events import SOURCE, STATUS_CHANGE
from spotrun.shape import REPO_ROOT
from tests.integration.test_local_control_up import wait_for
from tests.integration.webhook_receiver import webhook_receiver

runner = CliRunner()
TOKEN = "T0/B0/very-secret"


def test_local_up_notifies_a_webhook_and_writes_mails_to_its_outbox(tmp_path: Path) -> None:
    with webhook_receiver("/services/" + TOKEN) as receiver:
        # Given `spotrun local up` with a webhook for every event and an e-mail address for the ends
        workdir = tmp_path / "local"
        command = [sys.executable, "-m", "spotrun.cli.app", "local", "up", "--state-dir", str(workdir)]
        notify = ["--notify", f"webhook={receiver.url}", "--notify", "email=ops@example.com,events=ended"]
        up = subprocess.Popen(
            [*command, "--time-scale", "0.02", "--no-example", "--no-dashboard", *notify],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
        try:
            state = wait_for(
                lambda: (workdir / "local.json").exists() and read_state(workdir), 60, "the state"
            )

            # When a job's failure is published on the deployment's bus, as the job store publishes it
            events = boto3.client(
                "events",
                endpoint_url=state.endpoint_url,
                region_name=state.settings.region,
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
            )
            detail = {
                "job_id": "j-1",
                "name": "bert",
                "status": "FAILED",
                "headline": "Job bert (j-1) FAILED",
            }
            events.put_events(
                Entries=[
                    {
                        "Source": SOURCE,
                        "DetailType": STATUS_CHANGE,
                        "Detail": json.dumps(detail),
                        "EventBusName": state.settings.event_bus_name,
                    }
                ]
            )

            # Then the webhook gets its message, and the outbox a mail to the address
            texts = receiver.wait_for(lambda got: len(got) >= 1)
            mails = wait_for(lambda: sorted((workdir / "outbox").glob("*.eml")), 30, "a mail in the outbox")
        finally:
            up.send_signal(signal.SIGTERM)
            out, err = up.communicate(timeout=60)

    assert texts == ["spotrun: Job bert (j-1) FAILED"]
    (mail,) = (email.message_from_bytes(path.read_bytes()) for path in mails)
    assert mail["To"] == "ops@example.com"
    assert mail.get_payload().startswith("spotrun: Job bert (j-1) FAILED\n")
    # And `up` told who hears what and where the mails go, never showing the webhook's URL
    assert up.returncode == 0, err[-3000:]
    assert "1. a webhook: ended, interrupted, budget, deadline of every job" in out
    assert "2. ops@example.com: ended of every job" in out
    assert f"E-mails are written to {workdir / 'outbox'}/" in out
    assert TOKEN not in out + err


def test_a_notify_option_that_cannot_be_used_is_refused_without_repeating_it(tmp_path: Path) -> None:
    # Given / When: a webhook that is not a URL, and an unknown kind of event
    bad_url = runner.invoke(
        app, ["local", "up", "--state-dir", str(tmp_path), "--notify", "webhook=hooks/" + TOKEN]
    )
    bad_kind = runner.invoke(
        app, ["local", "up", "--state-dir", str(tmp_path), "--notify", "email=a@b.co,events=ended+lunch"]
    )

    # Then both are refused, naming the problem, and the token is not repeated
    assert bad_url.exit_code == 1
    assert "--notify: webhook" in bad_url.stderr
    assert TOKEN not in bad_url.output + bad_url.stderr
    assert bad_kind.exit_code == 1
    assert "events" in bad_kind.stderr

"""Notifications in the emulator: the job store's events reach webhooks and mailboxes as AWS would deliver them.

The events are written through the real job store (status changes, deadline decisions) on the runtime's bus; the
rules, the API destinations, the SNS topic and its e-mail subscription are the ones provisioning made from the
subscriptions. A whole job's notifications are in tests/e2e/test_interrupted_demo_job.py.
"""

from __future__ import annotations

import email
import json
import logging
import time
from collections.abc import Iterator

import pytest

from spotrun.aws.adapters import job_store
from spotrun.local.runtime import LocalRuntime
from spotrun.model.job.deadline_record import LifecycleDecision
from spotrun.model.job.record import JobError, JobStatus, ManifestSource, new_job, transition, utc_now
from spotrun.notifications import DEFAULT_AUTH_HEADER, parse_subscription
from tests.integration.webhook_receiver import Receiver, webhook_receiver

TOKEN = "xoxb-secret-token-123"


@pytest.fixture(scope="module")
def receivers() -> Iterator[dict[str, Receiver]]:
    with (
        webhook_receiver("/every/T000/" + TOKEN) as every,
        webhook_receiver() as nightly,
        webhook_receiver() as with_header,
    ):
        yield {"every": every, "nightly": nightly, "header": with_header}


@pytest.fixture(scope="module")
def runtime(tmp_path_factory, receivers) -> Iterator[LocalRuntime]:
    notifications = [
        parse_subscription(f"webhook={receivers['every'].url}"),
        parse_subscription(f"webhook={receivers['nightly'].url},events=interrupted+budget,jobs=nightly-"),
        parse_subscription(f"webhook={receivers['header'].url},events=ended,header=X-Token,token=s3cret"),
        parse_subscription("email=ml-team@example.com,events=ended"),
    ]
    with LocalRuntime(
        tmp_path_factory.mktemp("notify"), time_scale=0.01, notifications=notifications
    ) as started:
        yield started


def store(runtime: LocalRuntime):
    settings = runtime.settings
    return job_store(settings.jobs_table, settings.region, settings.event_bus_name)


def submitted(runtime: LocalRuntime, name: str):
    job = new_job(
        f"{name}-{time.monotonic_ns()}", name, ManifestSource(bucket="b", key="k", etag="e"), None, utc_now()
    )
    assert store(runtime).create(job)
    return store(runtime).get(job.job_id)


def training(runtime: LocalRuntime, job):
    """The job moved on to TRAINING, as its workflow would."""
    for status in (JobStatus.ACQUIRING, JobStatus.BOOTING, JobStatus.STAGING, JobStatus.TRAINING):
        job = store(runtime).save(transition(job, status, utc_now()))
    return job


def test_an_interruption_and_a_budget_failure_reach_the_webhooks_that_asked_for_them(runtime, receivers):
    # Given a job named nightly-bert, written through the job store
    job = training(runtime, submitted(runtime, "nightly-bert"))

    # When it is interrupted, then fails on its budget
    job = store(runtime).save(transition(job, JobStatus.INTERRUPTED, utc_now()))
    failed = transition(job, JobStatus.FAILED, utc_now()).model_copy(
        update={"error": JobError(type="Budget.Exceeded", message='spent "$12.40" of $12')}
    )
    store(runtime).save(failed)

    # Then the nightly subscriber hears both, once each, as Slack's {"text": ...} body
    texts = receivers["nightly"].wait_for(lambda got: len(got) >= 2)
    assert texts == [
        f"spotrun: Job nightly-bert ({job.job_id}) INTERRUPTED; spotrun resumes it from its last checkpoint",
        f"spotrun: Job nightly-bert ({job.job_id}) FAILED: Budget.Exceeded",
    ]
    # And the every-job subscriber hears the end, as does the one with a header; the SUBMITTED change is heard
    # by no one (no subscriber asked for it)
    every = receivers["every"].wait_for(lambda got: any(job.job_id in t and "FAILED" in t for t in got))
    assert [t for t in every if job.job_id in t] == texts
    receivers["header"].wait_for(lambda got: any(job.job_id in t and "FAILED" in t for t in got))


def test_a_webhook_is_posted_as_an_api_destination_posts_with_its_connections_header(runtime, receivers):
    # Given a job that ends
    job = submitted(runtime, "plain")
    store(runtime).save(transition(job, JobStatus.CANCELLED, utc_now()))

    # Then each webhook got a JSON POST on its own path, with its connection's header
    receivers["header"].wait_for(lambda got: any(job.job_id in t for t in got))
    receivers["every"].wait_for(lambda got: any(job.job_id in t for t in got))
    with receivers["header"].lock:
        request = next(r for r in receivers["header"].requests if job.job_id in r.json()["text"])
    assert request.headers["Content-Type"] == "application/json; charset=utf-8"
    assert request.headers["X-Token"] == "s3cret"
    with receivers["every"].lock:
        request = next(r for r in receivers["every"].requests if job.job_id in r.json()["text"])
    assert request.path == "/every/T000/" + TOKEN
    assert request.headers[DEFAULT_AUTH_HEADER] == "spotrun"
    # And the prefix kept the job from the nightly subscriber
    assert not any(job.job_id in text for text in receivers["nightly"].texts())


def test_a_deadline_decision_that_changes_the_choice_is_announced_once(runtime, receivers):
    # Given a job whose deadline policy chose spot
    job = submitted(runtime, "deadline-job")

    def decided(choice: str) -> LifecycleDecision:
        return LifecycleDecision(
            at=utc_now(), choice=choice, slack_hours=1.5, work_done_hours=0.2, reason="r"
        )

    job = store(runtime).save(job.model_copy(update={"deadline_decisions": [decided("spot")]}))

    # When it decides spot again, then on-demand, then on-demand once more
    job = store(runtime).save(
        job.model_copy(update={"deadline_decisions": [*job.deadline_decisions, decided("spot")]})
    )
    job = store(runtime).save(
        job.model_copy(update={"deadline_decisions": [*job.deadline_decisions, decided("on-demand")]})
    )
    store(runtime).save(
        job.model_copy(update={"deadline_decisions": [*job.deadline_decisions, decided("on-demand")]})
    )

    # Then the every-job subscriber hears of the move to on-demand, and only of it
    expected = (
        f"spotrun: Job deadline-job ({job.job_id}) deadline policy moved it from spot to on-demand "
        "with 1.5 h of slack"
    )
    receivers["every"].wait_for(lambda got: expected in got)
    time.sleep(0.5)
    assert [t for t in receivers["every"].texts() if job.job_id in t] == [expected]


def test_an_email_subscriber_gets_one_mail_per_end_in_the_outbox(runtime):
    # Given a job that succeeds
    job = training(runtime, submitted(runtime, "mailed"))
    job = store(runtime).save(transition(job, JobStatus.ARCHIVING, utc_now()))
    store(runtime).save(transition(job, JobStatus.SUCCEEDED, utc_now()))

    # Then the outbox holds a mail to the subscriber, saying what happened
    deadline = time.monotonic() + 30
    mails: list[email.message.Message] = []
    while time.monotonic() < deadline and not mails:
        mails = [
            message
            for path in sorted(runtime.outbox.glob("*.eml"))
            if job.job_id in (message := email.message_from_bytes(path.read_bytes())).get_payload()
        ]
        time.sleep(0.05)
    (mail,) = mails
    assert mail["To"] == "ml-team@example.com"
    assert mail["Subject"] == "AWS Notification Message"
    body = mail.get_payload()
    assert body.startswith(f"spotrun: Job mailed ({job.job_id}) SUCCEEDED\n")
    assert "Spotrun Job Status Change at " in body
    assert f"spotrun status {job.job_id}" in body


def test_the_webhook_url_and_token_appear_in_no_log_and_no_setting(runtime, receivers, caplog):
    # Given a webhook that refuses the first delivery (a retried answer)
    receivers["every"].answers.append(503)
    caplog.set_level(logging.DEBUG)
    job = submitted(runtime, "secretive")

    # When the job ends
    store(runtime).save(transition(job, JobStatus.CANCELLED, utc_now()))

    # Then the retry delivered it
    receivers["every"].wait_for(lambda got: any(job.job_id in t for t in got))
    # And neither the URL's token nor the header's value is in the logs or the deployment's settings
    assert TOKEN not in caplog.text
    assert "s3cret" not in caplog.text
    settings = json.dumps(runtime.settings.to_env())
    assert TOKEN not in settings
    assert "s3cret" not in settings


def test_an_answer_that_is_not_retried_sends_the_event_to_the_dead_letter_queue(runtime, receivers):
    # Given a webhook that answers 400 (a client error EventBridge does not retry)
    receivers["nightly"].answers.append(400)
    job = training(runtime, submitted(runtime, "nightly-dead"))

    # When the job is interrupted
    store(runtime).save(transition(job, JobStatus.INTERRUPTED, utc_now()))

    # Then the webhook was called once, and the dead-letter queue holds the message with the error
    receivers["nightly"].wait_for(lambda got: any(job.job_id in t for t in got))
    sqs = runtime.client("sqs")
    url = runtime.deployment.notification_dlq_url
    deadline = time.monotonic() + 10
    messages: list[dict] = []
    while time.monotonic() < deadline and not messages:
        messages = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"]).get("Messages", [])
    (message,) = messages
    assert job.job_id in json.loads(message["Body"])["text"]
    attributes = {name: value["StringValue"] for name, value in message["MessageAttributes"].items()}
    assert attributes["ERROR_CODE"] == "SDK_CLIENT_ERROR"
    assert attributes["ERROR_MESSAGE"] == "HTTP 400"
    assert attributes["TARGET_ARN"] == runtime.deployment.notification_targets["notify-2-webhook"]
    assert [t for t in receivers["nightly"].texts() if job.job_id in t] == [
        f"spotrun: Job nightly-dead ({job.job_id}) INTERRUPTED; spotrun resumes it from its last checkpoint"
    ]

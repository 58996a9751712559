"""Subscriptions: the --notify form, the patterns that pick each kind of event once, and the headlines."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from moto.events.models import EventPattern

from spotrun.control.job_events import publish_deadline_decision, status_change_detail
from spotrun.local.notifications.targets import apply_transformer
from spotrun.model.job.bus_events import DEADLINE_DECISION, HEADLINE_LIMIT, STATUS_CHANGE, safe_text
from spotrun.model.job.deadline_record import LifecycleDecision
from spotrun.model.job.record import JobError, JobStatus, ManifestSource, new_job
from spotrun.notifications import (
    ALL_KINDS,
    NotificationKind,
    message_transformer,
    notification_rules,
    parse_subscription,
    subscription_pattern,
)
from tests.unit.fakes import FakeEvents

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def event(detail_type: str, **detail: Any) -> dict[str, Any]:
    return {
        "version": "0",
        "id": "e-1",
        "detail-type": detail_type,
        "source": "spotrun",
        "account": "123456789012",
        "time": "2026-01-02T03:04:05Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {"name": "nightly-bert", "job_id": "j-1", "headline": "h", **detail},
    }


def matches(pattern: dict[str, Any], sample: dict[str, Any]) -> bool:
    """EventBridge's matching, as the emulator runs it (moto's EventPattern, which knows $or and prefix)."""
    return bool(EventPattern.load(json.dumps(pattern)).matches_event(sample))


INTERRUPTED = event(STATUS_CHANGE, status="INTERRUPTED")
SUCCEEDED = event(STATUS_CHANGE, status="SUCCEEDED")
BUDGET = event(STATUS_CHANGE, status="FAILED", error={"type": "Budget.Exceeded", "message": "m"})
FAILED = event(STATUS_CHANGE, status="FAILED", error={"type": "Training.Failed", "message": "m"})
TRAINING = event(STATUS_CHANGE, status="TRAINING")
DEADLINE = event(DEADLINE_DECISION, choice="on-demand")


@pytest.mark.parametrize(
    ("events", "heard"),
    [
        ("ended", {"SUCCEEDED", "BUDGET", "FAILED"}),
        ("interrupted", {"INTERRUPTED"}),
        ("budget", {"BUDGET"}),
        ("deadline", {"DEADLINE"}),
        ("interrupted+budget", {"INTERRUPTED", "BUDGET"}),
        ("ended+budget+deadline", {"SUCCEEDED", "BUDGET", "FAILED", "DEADLINE"}),
    ],
)
def test_a_subscription_hears_exactly_its_kinds(events: str, heard: set[str]) -> None:
    # Given a subscription to some kinds
    pattern = subscription_pattern(parse_subscription(f"email=a@b.co,events={events}"))
    samples = {
        "INTERRUPTED": INTERRUPTED,
        "SUCCEEDED": SUCCEEDED,
        "BUDGET": BUDGET,
        "FAILED": FAILED,
        "TRAINING": TRAINING,
        "DEADLINE": DEADLINE,
    }

    # When / Then: its one pattern matches those events and no other (a budget failure once, even with "ended")
    assert {name for name, sample in samples.items() if matches(pattern, sample)} == heard


def test_a_job_prefix_narrows_every_kind_to_the_jobs_it_starts() -> None:
    # Given a subscription to every kind of the jobs named nightly-*
    pattern = subscription_pattern(parse_subscription("webhook=https://h.example/x,jobs=nightly-"))
    other = {**DEADLINE, "detail": {**DEADLINE["detail"], "name": "weekly-bert"}}
    other_end = {**SUCCEEDED, "detail": {**SUCCEEDED["detail"], "name": "weekly-bert"}}

    # Then its jobs' events match and another job's do not
    assert all(matches(pattern, sample) for sample in (INTERRUPTED, SUCCEEDED, BUDGET, DEADLINE))
    assert not matches(pattern, other)
    assert not matches(pattern, other_end)


def test_the_notify_form_reads_every_part_and_keeps_the_url_out_of_its_repr() -> None:
    # Given / When
    subscription = parse_subscription(
        "webhook=https://hooks.slack.com/services/T0/B0/s3cr3t,events=ended+deadline,jobs=nightly-,header=X-T,token=v4lue"
    )

    # Then
    assert subscription.events == (NotificationKind.ENDED, NotificationKind.DEADLINE)
    assert subscription.jobs == "nightly-"
    assert subscription.header == "X-T"
    assert "s3cr3t" not in repr(subscription)
    assert "v4lue" not in repr(subscription)
    assert parse_subscription("email=a@b.co").events == ALL_KINDS


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("email=a@b.co,webhook=https://h.example/x", "exactly one of"),
        ("sms=123", "--notify takes"),
        ("email=a@b.co,events=", "key=value"),
        ("email=a@b.co,jobs=Nightly", "start of a job name"),
        ("email=a@b.co,jobs=a,jobs=b", "given twice"),
        ("webhook=https://h.example/x,token=secret-value", "give header too"),
        ("email=a@b.co,header=X-T", "for webhooks"),
    ],
)
def test_a_notify_form_that_cannot_be_used_is_refused(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_subscription(text)
    assert fragment in str(refused.value)
    assert "secret-value" not in str(refused.value)


def test_rules_are_named_by_position_and_kind() -> None:
    rules = notification_rules([parse_subscription("email=a@b.co"), parse_subscription("webhook=http://h/x")])
    assert [rule.name for rule in rules] == ["notify-1-email", "notify-2-webhook"]
    assert rules[0].description.startswith("Notifies an e-mail subscriber of ended, interrupted")


def test_a_headline_holds_nothing_an_input_template_cannot_carry() -> None:
    # Given a text with quotes, backslashes, angle brackets and control characters, and a very long one
    text = 'job "x"\\y <z>\n\tend'

    # Then they are gone, and the long one is cut to the limit
    assert safe_text(text) == "job x y z end"
    assert len(safe_text("a" * 1000)) == HEADLINE_LIMIT


def test_the_webhook_message_is_valid_json_even_when_the_error_is_hostile() -> None:
    # Given a rejected job whose name and error hold quotes (a REJECTED manifest's name is not validated)
    job = new_job("j-1", 'bad"name\\', ManifestSource(bucket="b", key="k", etag="e"), None, AT)
    job = job.model_copy(
        update={"status": JobStatus.FAILED, "error": JobError(type='Manifest."Invalid"', message='a "b"')}
    )
    sample = event(STATUS_CHANGE, **status_change_detail(job, JobStatus.SUBMITTED))

    # When the webhook's transformer fills its template
    transformer = message_transformer("webhook")
    body = apply_transformer(
        {"InputPathsMap": transformer.paths, "InputTemplate": transformer.template}, sample, "arn", "rule"
    )

    # Then the body is Slack's JSON, saying what happened
    assert body == {"text": "spotrun: Job bad name (j-1) FAILED: Manifest. Invalid"}


def test_the_email_message_is_text() -> None:
    transformer = message_transformer("email")
    body = apply_transformer(
        {"InputPathsMap": transformer.paths, "InputTemplate": transformer.template},
        event(STATUS_CHANGE, status="SUCCEEDED", headline="Job a (j-1) SUCCEEDED"),
        "arn",
        "rule",
    )
    assert body == (
        "spotrun: Job a (j-1) SUCCEEDED\n\nSpotrun Job Status Change at 2026-01-02T03:04:05Z.\n"
        "Details: spotrun status j-1\n"
    )


def test_a_transformer_path_without_a_match_leaves_its_placeholder_empty() -> None:
    body = apply_transformer(
        {
            "InputPathsMap": {"x": "$.detail.missing"},
            "InputTemplate": '{"text": "[<x>] <aws.events.rule-name>"}',
        },
        event(STATUS_CHANGE),
        "arn",
        "my-rule",
    )
    assert body == {"text": "[] my-rule"}


def decided(choice: str) -> LifecycleDecision:
    return LifecycleDecision(at=AT, choice=choice, slack_hours=None, work_done_hours=0.0, reason="r")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("previous", "newest", "published"),
    [
        (None, "spot", False),
        ("spot", "spot", False),
        ("spot", "on-demand", True),
        ("on-demand", "wait", True),
    ],
)
def test_a_deadline_decision_is_published_only_when_the_choice_changed(
    previous: str | None, newest: str, published: bool
) -> None:
    # Given a deadline job whose newest decision is `newest`, and what the replaced document held
    job = new_job("j-1", "d", ManifestSource(bucket="b", key="k", etag="e"), None, AT)
    job = job.model_copy(update={"deadline_decisions": [decided(newest)]})
    events = FakeEvents()

    # When the store publishes after its write
    publish_deadline_decision(events, job, previous)

    # Then an event is published exactly when the choice changed, saying from what to what
    assert bool(events.published) is published
    if published:
        ((detail_type, detail),) = events.published
        assert detail_type == DEADLINE_DECISION
        assert (detail["previous_choice"], detail["choice"]) == (previous, newest)
        assert detail["headline"] == f"Job d (j-1) deadline policy moved it from {previous} to {newest}"

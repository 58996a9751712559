"""A real job in the emulator notifies a webhook on 127.0.0.1 when it is interrupted and when it ends."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from spotrun.local.demo import upload_example
from spotrun.local.runtime import LocalRuntime
from spotrun.model.job.record import JobStatus
from spotrun.notifications import parse_subscription
from tests.e2e.conftest import E2E_TIME_SCALE, example_manifest, run_with_chaos
from tests.integration.webhook_receiver import Receiver, webhook_receiver


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with webhook_receiver("/services/T000/B000/token") as started:
        yield started


@pytest.fixture(scope="module")
def runtime(tmp_path_factory, receiver) -> Iterator[LocalRuntime]:
    # Subscribed as `spotrun local up --notify webhook=URL,events=ended+interrupted,jobs=notified-` subscribes.
    subscription = parse_subscription(f"webhook={receiver.url},events=ended+interrupted,jobs=notified-")
    with LocalRuntime(
        tmp_path_factory.mktemp("runtime"), time_scale=E2E_TIME_SCALE, notifications=[subscription]
    ) as started:
        upload_example(started)
        yield started


def test_an_interrupted_job_notifies_its_interruption_then_its_success(runtime, receiver):
    # Given the example job, named for the subscription's prefix
    manifest = example_manifest(**{"name: tiny-regression": "name: notified-regression"})

    # When its instance gets a spot interruption warning at step 40, and the job runs to its end
    job = run_with_chaos(runtime, manifest, "notified.yaml", [40], runtime.interrupt)

    # Then the webhook heard the interruption on attempt 1, then the success on attempt 2, and nothing else
    assert job.status is JobStatus.SUCCEEDED, job.error
    texts = receiver.wait_for(lambda got: len(got) >= 2)
    first, second = job.attempts[0], job.attempts[1]
    assert texts == [
        f"spotrun: Job notified-regression ({job.job_id}) INTERRUPTED on attempt 1 ({first.instance_type} "
        f"{first.lifecycle}, {first.availability_zone}); spotrun resumes it from its last checkpoint",
        f"spotrun: Job notified-regression ({job.job_id}) SUCCEEDED on attempt 2 ({second.instance_type} "
        f"{second.lifecycle}, {second.availability_zone})",
    ]
    assert all(request.path == "/services/T000/B000/token" for request in receiver.requests)


def test_a_job_outside_the_prefix_notifies_no_one(runtime, receiver):
    # Given what the webhook heard so far
    heard = len(receiver.texts())

    # When a job of another name fails (its script exits with an error)
    manifest = example_manifest(
        **{
            "name: tiny-regression": "name: quiet-regression",
            "command: [python, train.py": "command: [python, -c, 'raise SystemExit(3)'",
        }
    )
    job = run_with_chaos(runtime, manifest, "quiet.yaml", [], runtime.interrupt)

    # Then it ended, and the webhook heard nothing of it (a delivery takes milliseconds here; a second is ample)
    assert job.status is JobStatus.FAILED
    time.sleep(1.0)
    assert len(receiver.texts()) == heard

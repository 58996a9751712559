"""The functions' runtime: ports made once per execution environment, from settings checked on the first call."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from functions import release, runtime
from spotrun.aws import adapters
from spotrun.aws.settings import MissingSettings, Settings
from spotrun.control.capacity import release as release_use_case
from spotrun.local.patches.lambda_invoke import ExecutionEnvironments
from spotrun.shape import SHAPE
from tests.lambda_context import lambda_context

RELEASE_ENV = {
    "SPOTRUN_JOBS_TABLE": "spotrun-jobs",
    "SPOTRUN_EVENT_BUS_NAME": "spotrun-events",
    "AWS_REGION": "eu-west-1",
}
RELEASE_CONTEXT = lambda_context("spotrun-release", "eu-west-1")


@pytest.fixture
def environment(monkeypatch):
    """A fresh execution environment of the release function: only its declared variables, fake adapters."""
    for name in [name for name in os.environ if name.startswith(("SPOTRUN_", "AWS_"))]:
        monkeypatch.delenv(name)
    for name, value in {**RELEASE_ENV, "POWERTOOLS_TRACE_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)
    built: list[tuple[str, Any]] = []

    def factory(kind: str) -> Any:
        def build(*args: Any) -> object:
            built.append((kind, args))
            return object()

        return build

    monkeypatch.setattr(runtime, "job_store", factory("store"))
    monkeypatch.setattr(runtime, "Ec2Compute", factory("compute"))
    used: list[dict[str, Any]] = []

    def release_for_workflow(**kwargs: Any) -> list[str]:
        used.append(kwargs)
        return []

    monkeypatch.setattr(release, "release_for_workflow", release_for_workflow)
    runtime.reset()
    yield built, used
    runtime.reset()


def test_two_invocations_in_one_environment_share_the_ports_made_on_the_first(environment):
    # Given an execution environment of the release function
    built, used = environment
    # When it is invoked twice
    for _ in range(2):
        release.handler({"job_id": "j-1", "reason": "done"}, RELEASE_CONTEXT)
    # Then its store and EC2 adapter were made once, on the first invocation, and both invocations used them
    assert built == [
        ("store", ("spotrun-jobs", "eu-west-1", "spotrun-events")),
        ("compute", ("eu-west-1",)),
    ]
    assert used[0]["store"] is used[1]["store"]
    assert used[0]["compute"] is used[1]["compute"]


def test_reset_starts_a_new_environment_that_reads_the_settings_again(environment, monkeypatch):
    built, _ = environment
    # Given an environment that has served an invocation
    release.handler({"job_id": "j-1", "reason": "done"}, RELEASE_CONTEXT)
    # When the settings change and the runtime is reset (as the test fixtures do between tests)
    monkeypatch.setenv("SPOTRUN_JOBS_TABLE", "other-jobs")
    runtime.reset()
    release.handler({"job_id": "j-1", "reason": "done"}, RELEASE_CONTEXT)
    # Then the next invocation made its ports again, from the new settings
    assert [args for kind, args in built if kind == "store"] == [
        ("spotrun-jobs", "eu-west-1", "spotrun-events"),
        ("other-jobs", "eu-west-1", "spotrun-events"),
    ]


def test_each_function_has_its_own_ports_with_only_the_settings_it_declares(environment, monkeypatch):
    # Given an environment holding every setting (as a test process does), not only release's
    monkeypatch.setenv("SPOTRUN_JOBS_BUCKET", "spotrun-jobs-bucket")
    monkeypatch.setenv("SPOTRUN_AGENT_DOCUMENT_NAME", "spotrun-agent-run")
    monkeypatch.setenv(
        "SPOTRUN_AGENT_REPORT_URL", "https://a1b2c3d4e5.execute-api.us-east-1.amazonaws.com/v1/agent/reports"
    )
    # When release's and agent_step's ports are asked for
    released, stepped = runtime.ports("release"), runtime.ports("agent_step")
    # Then they are distinct, and each read its declared settings only, as in its deployed environment
    assert released is not stepped
    assert released.settings.jobs_bucket == ""
    assert stepped.settings.jobs_bucket == "spotrun-jobs-bucket"
    assert stepped.settings.region == "eu-west-1"


def test_a_missing_variable_fails_the_first_invocation_naming_it(environment, monkeypatch):
    _, used = environment
    # Given a release function deployed without its jobs table
    monkeypatch.delenv("SPOTRUN_JOBS_TABLE")
    # When it is invoked
    with pytest.raises(MissingSettings) as raised:
        release.handler({"job_id": "j-1", "reason": "done"}, RELEASE_CONTEXT)
    # Then it fails before any use case runs, naming the variable
    assert "SPOTRUN_JOBS_TABLE" in str(raised.value)
    assert "release" in str(raised.value)
    assert used == []


def test_an_empty_variable_is_missing_unless_empty_means_something():
    # Given the agent_step function's declared settings
    names = SHAPE.function("agent_step").settings
    env = {f"SPOTRUN_{name.upper()}": f"value-of-{name}" for name in names}
    # When its jobs bucket is empty, then it is refused by name; an empty bus (publish nothing) is taken
    with pytest.raises(MissingSettings, match="SPOTRUN_JOBS_BUCKET"):
        Settings.for_function("agent_step", names, {**env, "SPOTRUN_JOBS_BUCKET": ""})
    taken = Settings.for_function("agent_step", names, {**env, "SPOTRUN_EVENT_BUS_NAME": ""})
    assert taken.event_bus_name == ""
    assert taken.jobs_bucket == "value-of-jobs_bucket"


def test_each_emulated_environment_makes_its_own_ports_once(environment, monkeypatch):
    # Given the release function served by the emulator's environments, each a fresh import of functions/
    stores: list[object] = []
    both = threading.Barrier(2, timeout=10)

    def job_store(*args: Any) -> object:
        stores.append(object())
        return stores[-1]

    def release_for_workflow(**kwargs: Any) -> list[str]:
        if kwargs["job_id"] == "together":
            both.wait()  # two invocations at once: two environments
        return [str(stores.index(kwargs["store"]))]

    monkeypatch.setattr(adapters, "job_store", job_store)
    monkeypatch.setattr(adapters, "Ec2Compute", lambda region: object())
    monkeypatch.setattr(release_use_case, "release_for_workflow", release_for_workflow)
    environments = ExecutionEnvironments("functions.release.handler")
    answers: list[Any] = []

    def invoke(job_id: str) -> None:
        answers.append(environments({"job_id": job_id, "reason": "done"}, RELEASE_CONTEXT)["terminated"])

    # When two invocations run at once, then four more one after another
    threads = [threading.Thread(target=invoke, args=("together",)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for _ in range(4):
        invoke("later")
    # Then each of the two environments made one store, and the later invocations reused theirs
    assert environments.created == 2
    assert len(stores) == 2
    assert sorted(answers[:2]) == [["0"], ["1"]]
    assert {answer[0] for answer in answers[2:]} <= {"0", "1"}

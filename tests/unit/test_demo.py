"""The demo's plumbing: where the control plane's logs go, and when a job counts as finished."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spotrun.local import demo
from spotrun.model.job.record import Job, JobStatus, ManifestSource, new_job
from spotrun.shape import SERVICE_NAME

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def service_handler():
    """A handler on the service logger built from ``sys.stdout`` when first needed, as Powertools' Logger does."""
    logger = logging.getLogger(SERVICE_NAME)
    # Alone on the logger: a Powertools handler left by other tests would write into the same files.
    existing, logger.handlers = logger.handlers, []
    added: list[logging.Handler] = []

    def build() -> logging.StreamHandler:  # type: ignore[type-arg]
        handler = logging.StreamHandler(sys.stdout)
        logger.addHandler(handler)
        added.append(handler)
        return handler

    level = logger.level
    logger.setLevel(logging.INFO)
    yield build
    logger.handlers = existing
    logger.setLevel(level)


def test_a_handler_first_built_during_a_run_is_not_left_on_the_closed_log(tmp_path, capsys, service_handler):
    # Given a run in which a handler module builds its logger (so on the redirected stdout, the log file)
    outer = sys.stdout
    with demo.control_plane_logs(tmp_path / "first.log"):
        handler = service_handler()
        logging.getLogger(SERVICE_NAME).info("first run")

    # When the service logs between runs, then during a second run in the same process
    logging.getLogger(SERVICE_NAME).info("between runs")
    with demo.control_plane_logs(tmp_path / "second.log"):
        logging.getLogger(SERVICE_NAME).info("second run")

    # Then the handler went back to the stdout of before the run, not the closed file, and each run's lines
    # are in its own file, with no logging error anywhere
    assert handler.stream is outer
    captured = capsys.readouterr()
    assert "Logging error" not in captured.err
    assert "between runs" in captured.out
    assert (tmp_path / "first.log").read_text() == "first run\n"
    assert (tmp_path / "second.log").read_text() == "second run\n"


class _LoggingRuntime:
    """Stands for LocalRuntime: its shutdown logs and prints a metrics line, as a last handler call can."""

    def __init__(self, workdir: Path, time_scale: float) -> None:
        self.workdir = workdir

    def __enter__(self) -> _LoggingRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger(SERVICE_NAME).info("runtime stopping")
        print('{"_aws": {"CloudWatchMetrics": []}}')


def test_the_runtime_stops_before_its_log_file_closes(tmp_path, capsys, monkeypatch, service_handler):
    # Given a runtime whose shutdown logs and prints metrics, and a service handler already built
    monkeypatch.setattr(demo, "LocalRuntime", _LoggingRuntime)
    service_handler()

    # When the demo's runtime runs with a log file (in a directory not made yet) and stops
    log_file = tmp_path / "demo" / "control-plane.log"
    with demo.local_runtime(tmp_path / "demo", log_file=log_file):
        pass

    # Then what its shutdown wrote is in the file, and nothing reached the terminal
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")
    assert log_file.read_text().splitlines() == [
        "runtime stopping",
        '{"_aws": {"CloudWatchMetrics": []}}',
    ]


class _Executions:
    """Step Functions answering RUNNING a given number of times, then SUCCEEDED."""

    def __init__(self, running_answers: int) -> None:
        self.left = running_answers
        self.calls = 0

    def describe_execution(self, executionArn: str) -> dict[str, Any]:  # noqa: N803 - boto3's spelling
        self.calls += 1
        self.left -= 1
        return {"executionArn": executionArn, "status": "RUNNING" if self.left >= 0 else "SUCCEEDED"}


def _finished_job(execution_arn: str | None) -> Job:
    job = new_job("tiny-1", "tiny", ManifestSource(bucket="b", key="k", etag="e"), None, T0)
    return job.model_copy(update={"status": JobStatus.SUCCEEDED, "execution_arn": execution_arn})


def _runtime(executions: _Executions) -> Any:
    settings = SimpleNamespace(jobs_table="jobs", region="us-east-1")
    return SimpleNamespace(settings=settings, client=lambda service: executions)


def test_a_terminal_job_is_finished_only_once_its_workflow_has_ended(monkeypatch):
    # Given a job already terminal in its record while its execution still runs its last task
    job = _finished_job("arn:aws:states:us-east-1:123456789012:execution:spotrun-job:tiny-1")
    monkeypatch.setattr(demo, "job_store", lambda *args: SimpleNamespace(get=lambda job_id: job))
    executions = _Executions(running_answers=3)

    # When the demo waits for the job
    finished = demo.wait_for_job(_runtime(executions), "tiny-1", timeout=10, poll=0.001)

    # Then it returned only after the execution stopped running
    assert finished.status is JobStatus.SUCCEEDED
    assert executions.calls == 4


def test_a_job_rejected_before_any_workflow_is_finished_at_once(monkeypatch):
    # Given a terminal job that never had an execution
    job = _finished_job(None)
    monkeypatch.setattr(demo, "job_store", lambda *args: SimpleNamespace(get=lambda job_id: job))
    executions = _Executions(running_answers=0)

    # When the demo waits for it
    finished = demo.wait_for_job(_runtime(executions), "tiny-1", timeout=10, poll=0.001)

    # Then it returns without asking Step Functions
    assert finished is job
    assert executions.calls == 0


def test_an_example_whose_frameworks_are_missing_is_refused_naming_them(tmp_path, monkeypatch):
    # Given an example whose requirements name one installed distribution and one that is not
    example = tmp_path / "needs-frameworks"
    example.mkdir()
    (example / "manifest.yaml").write_text("name: x\n")
    (example / "requirements.txt").write_text(
        "# frameworks\npydantic>=2\nno-such-framework-xyz[extra]>=1 ; python_version>'3'\n\n"
    )
    monkeypatch.setattr(demo, "EXAMPLES_DIR", tmp_path)

    # When the demo looks it up, then it is refused before any job starts, naming only the missing one
    with pytest.raises(
        ValueError, match=r"needs no-such-framework-xyz, not installed here: pip install"
    ) as refused:
        demo.example_dir("needs-frameworks")
    assert "pydantic" not in str(refused.value)


def test_the_framework_examples_need_only_what_the_dev_environment_has():
    # Given the examples shipped in the repository, when their requirements are checked here,
    # then nothing is missing (the train extra installs them), so `spotrun demo --example` can run each
    for name in demo.available_examples():
        assert demo.missing_requirements(demo.EXAMPLES_DIR / name) == [], name

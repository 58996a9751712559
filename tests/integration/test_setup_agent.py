"""The stage step runs training.setup: in order, in the code directory, with the command's environment, its
output opening the attempt's log; a failure is Setup.Failed, and a restart on the same instance does not set up
again."""

from __future__ import annotations

import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from spotrun.agent.step_runner import EXIT_ABANDONED, EXIT_REPORTED, execute
from spotrun.model import layout
from spotrun.model.agent_protocol.command import BUDGET_EXCEEDED, SETUP_FAILED
from tests.integration.conftest import AGENT_BUCKET as BUCKET
from tests.integration.test_agent import (
    command,
    context,
    failure_of,
    manifest,
    object_bytes,
    success_of,
    upload_example,
)

JOB = "j-000000000001"
PY = sys.executable


def py(code: str) -> list[str]:
    return [PY, "-c", code]


def setup_manifest(setup: list[list[str]], **training: Any) -> dict[str, Any]:
    return manifest(setup=setup, env={"GREETING": "hello", "API_KEY": "s3cr3t-never-logged"}, **training)


def test_setup_runs_in_order_in_the_code_directory_with_the_commands_environment(s3, tmp_path, example_data):
    # Given two setup commands: the first writes a file the second reads, both print where and with what they ran
    upload_example(s3, example_data)
    document = setup_manifest(
        [
            py(
                "import os; open('made-by-setup', 'w').write(os.environ['GREETING']); print('first', os.getcwd())"
            ),
            py(
                "import os; from spotrun import training; "
                "print('second', open('made-by-setup').read(), os.environ['SPOTRUN_JOB_ID'], training.ENV_JOB_ID)"
            ),
        ]
    )
    ctx = context(s3, tmp_path / "nvme")

    # When the stage step runs
    status = execute(command("stage", document), ctx)

    # Then both ran in order, in the code directory, with training.env, the contract and spotrun.training; the
    # attempt's log holds each command's header then its output, and is already in the jobs bucket
    result = success_of(ctx)
    job = layout.NvmeLayout(tmp_path / "nvme", JOB)
    log = job.log_file(1).read_text()
    assert status == EXIT_REPORTED
    assert f"first {job.code_dir}" in log
    assert f"second hello {JOB} SPOTRUN_JOB_ID" in log
    assert log.index("--- spotrun: setup 1/2:") < log.index("first") < log.index("--- spotrun: setup 2/2:")
    assert log.index("--- spotrun: setup 2/2:") < log.index("second")
    assert object_bytes(s3, layout.log_key(JOB, 1)).decode() == log
    assert result["setup_seconds"] > 0
    assert "s3cr3t-never-logged" not in log  # the environment itself is never written


def test_a_failing_setup_command_is_setup_failed_with_its_command_exit_code_and_tail(
    s3, tmp_path, example_data
):
    # Given a setup whose second command exits 3 after printing, and a third that must not run
    upload_example(s3, example_data)
    document = setup_manifest(
        [
            py("print('fine')"),
            py("import sys; print('cannot find requirements'); sys.exit(3)"),
            py("open('third-ran', 'w')"),
        ]
    )
    ctx = context(s3, tmp_path / "nvme")

    # When
    status = execute(command("stage", document), ctx)

    # Then the step reports Setup.Failed naming the command and its exit code, with the log's tail, uploaded
    error, cause = failure_of(ctx)
    job = layout.NvmeLayout(tmp_path / "nvme", JOB)
    assert status == EXIT_REPORTED
    assert error == SETUP_FAILED
    assert cause.exit_code == 3
    assert "setup command 2 of 3" in cause.message
    assert "exit code 3" in cause.message
    assert "sys.exit(3)" in cause.message
    assert cause.log_tail is not None
    assert "cannot find requirements" in cause.log_tail
    assert cause.log_key == layout.log_key(JOB, 1)
    assert b"cannot find requirements" in object_bytes(s3, layout.log_key(JOB, 1))
    assert not (job.code_dir / "third-ran").exists()


def test_a_setup_command_that_cannot_start_is_setup_failed(s3, tmp_path, example_data):
    # Given a setup command naming no program on the instance
    upload_example(s3, example_data)
    ctx = context(s3, tmp_path / "nvme")

    # When
    execute(command("stage", setup_manifest([["no-such-program-spotrun", "--version"]])), ctx)

    # Then
    error, cause = failure_of(ctx)
    assert error == SETUP_FAILED
    assert cause.exit_code == 127
    assert "could not be started" in cause.message
    assert "no-such-program-spotrun" in (cause.log_tail or "")


def test_setup_past_its_time_limit_is_stopped_and_setup_failed(s3, tmp_path, example_data, monkeypatch):
    # Given a setup command that would run for a minute, and a time limit of one minute scaled to 0.5 s
    upload_example(s3, example_data)
    real_run_setup = sys.modules["spotrun.agent.steps.stage"].run_setup

    def short(*args: Any, **kwargs: Any) -> float:
        return real_run_setup(*args, **{**kwargs, "timeout_seconds": 0.5})

    monkeypatch.setattr("spotrun.agent.steps.stage.run_setup", short)
    ctx = context(s3, tmp_path / "nvme")

    # When
    execute(command("stage", setup_manifest([py("import time; time.sleep(60)")])), ctx)

    # Then it was stopped, and the failure says why
    error, cause = failure_of(ctx)
    assert error == SETUP_FAILED
    assert cause.exit_code is None
    assert "setup_timeout_minutes" in cause.message


def test_a_training_restart_on_the_same_instance_does_not_set_up_again(s3, tmp_path, example_data):
    # Given a setup that counts its runs, and a command that fails once then succeeds (restarts_on_error: 1)
    upload_example(s3, example_data)
    counter = (
        "import pathlib; p = pathlib.Path('setup-runs');"
        "p.write_text(str(int(p.read_text()) + 1) if p.exists() else '1')"
    )
    train = (
        "import os, pathlib, sys; from spotrun import training; marker = pathlib.Path('failed-once');"
        "ok = marker.exists(); marker.touch();"
        "ok or sys.exit(1);"
        "pathlib.Path(os.environ[training.ENV_OUTPUT_DIR], 'model.npy').write_bytes(b'm')"
    )
    document = setup_manifest([py(counter)], command=py(train), restarts_on_error=1)
    nvme = tmp_path / "nvme"
    assert execute(command("stage", document), context(s3, nvme)) == EXIT_REPORTED

    # When the train step runs, restarting the command once
    ctx = context(s3, nvme)
    execute(command("train", document), ctx)

    # Then training succeeded after a restart, and setup ran once; its output precedes the training runs'
    success_of(ctx)
    job = layout.NvmeLayout(nvme, JOB)
    log = job.log_file(1).read_text()
    assert (job.code_dir / "setup-runs").read_text() == "1"
    assert log.count("--- spotrun: setup 1/1") == 1
    assert log.index("setup done") < log.index("run 1 of at most 2") < log.index("run 2 of at most 2")


def test_a_job_without_setup_stages_as_before(s3, tmp_path, example_data):
    # Given / When a manifest without setup is staged
    upload_example(s3, example_data)
    ctx = context(s3, tmp_path / "nvme")
    execute(command("stage", manifest()), ctx)

    # Then nothing ran, no log was written, and no setup time is reported
    result = success_of(ctx)
    assert result["setup_seconds"] is None
    assert not layout.NvmeLayout(tmp_path / "nvme", JOB).log_file(1).exists()
    assert "Contents" not in s3.list_objects_v2(Bucket=BUCKET, Prefix=layout.log_key(JOB, 1))


def test_setup_stops_and_reports_nothing_once_the_workflow_stops_waiting(s3, tmp_path, example_data):
    # Given a long setup, and a workflow that refuses the step's heartbeats a moment after it starts
    upload_example(s3, example_data)
    ctx = context(s3, tmp_path / "nvme")
    threading.Timer(0.5, ctx.abandoned.set).start()
    started = time.monotonic()

    # When the stage step runs
    status = execute(command("stage", setup_manifest([py("import time; time.sleep(60)")])), ctx)

    # Then setup was stopped at once and nothing was reported: the task is no one's any more
    assert status == EXIT_ABANDONED
    assert time.monotonic() - started < 30
    assert ctx.reporter.success is None  # type: ignore[attr-defined]
    assert ctx.reporter.failure is None  # type: ignore[attr-defined]


def test_setup_stops_where_the_jobs_budget_runs_out_and_reports_budget_exceeded(s3, tmp_path, example_data):
    # Given a long setup, and a stage command whose budget runs out in half a second
    upload_example(s3, example_data)
    ctx = context(s3, tmp_path / "nvme")
    stop_at = datetime.now(UTC) + timedelta(seconds=0.5)
    document = setup_manifest([py("import time; time.sleep(60)")])

    # When the stage step runs
    execute(command("stage", document, stop_at=stop_at), ctx)

    # Then setup was stopped there and the job ends as at its budget in training, Budget.Exceeded
    error, cause = failure_of(ctx)
    assert error == BUDGET_EXCEEDED
    assert "budget.max_usd" in cause.message
    assert cause.exit_code is None


def test_setup_commands_get_the_contracts_and_training_envs_names_expanded(s3, tmp_path, example_data):
    # Given a setup command naming ${SPOTRUN_CODE_DIR} and ${GREETING} (from training.env), as the command may
    upload_example(s3, example_data)
    document = setup_manifest(
        [[*py("import sys; print('args', sys.argv[1:])"), "${SPOTRUN_CODE_DIR}", "${GREETING}"]]
    )
    ctx = context(s3, tmp_path / "nvme")

    # When the stage step runs
    status = execute(command("stage", document), ctx)

    # Then the command got the values; the log's header shows the argv as written
    job = layout.NvmeLayout(tmp_path / "nvme", JOB)
    log = job.log_file(1).read_text()
    assert status == EXIT_REPORTED
    assert f"args ['{job.code_dir}', 'hello']" in log
    assert "'${SPOTRUN_CODE_DIR}', '${GREETING}']" in log.splitlines()[0]

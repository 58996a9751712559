"""Unit tests of budget.max_usd and max_runtime_minutes as users see them: the record, the summary and the CLI."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import typer
from rich.console import Console

from spotrun.cli.api import jobs_table
from spotrun.cli.display.summary import limits_text
from spotrun.cli.jobs import _show_ended
from spotrun.control.finalize import finalize_job
from spotrun.control.store import update_job
from spotrun.control.views.jobs import list_jobs
from spotrun.model.agent_protocol.command import FailureCause
from spotrun.model.job.limits import exit_code
from spotrun.model.job.record import JobStatus, ManifestSource, new_job
from spotrun.shape import REPO_ROOT
from tests.unit.fakes import FakeCompute, InMemoryJobStore
from tests.unit.test_limits import PRICE, T0, acquire, manifest, submitted, to

# -- the record, the summary and the CLI --------------------------------------------------------------------


def test_a_job_stopped_at_its_budget_records_spend_and_limit_and_says_so():
    # Given a job whose train step reported Budget.Exceeded, its instance released
    document = manifest(max_usd=0.01)
    store, compute = InMemoryJobStore(), FakeCompute(price=PRICE)
    submitted(store, document)
    acquire(store, compute, T0, document)
    to(store, JobStatus.STAGING, T0 + timedelta(seconds=10))
    to(store, JobStatus.TRAINING, T0 + timedelta(seconds=20))
    update_job(
        store,
        "tiny-0123456789ab",
        lambda current: current.model_copy(
            update={
                "attempts": [current.attempts[0].model_copy(update={"ended_at": T0 + timedelta(seconds=150)})]
            }
        ),
    )
    cause = FailureCause(message="the job's budget.max_usd would be passed", checkpoint_step=40)
    # When the workflow finalizes it
    job = finalize_job(
        job_id="tiny-0123456789ab",
        outcome="FAILED",
        error={"Error": "Budget.Exceeded", "Cause": cause.model_dump_json()},
        store=store,
        now=T0 + timedelta(seconds=151),
    )
    # Then the record holds the spend and the limit, the error says it, and the summary line too
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.type == "Budget.Exceeded"
    assert job.limits is not None
    assert job.limits.max_usd == 0.01
    assert job.limits.spent_usd == round(PRICE * 150 / 3600, 4)
    assert job.limits.training_seconds == 131  # TRAINING from T0+20 s until it ended at T0+151 s
    assert job.error.details[0] == f"spent {PRICE * 150 / 3600:.4f} USD of budget.max_usd 0.01 USD"
    assert (
        limits_text(job).plain
        == f"limits: spent ${PRICE * 150 / 3600:.4f} of budget $0.01; trained 131 s of 30 min"
    )


def test_the_cli_exit_code_tells_a_limit_from_another_failure():
    # Given views of ended jobs
    def view(status, error_type):
        error = None if error_type is None else {"type": error_type, "message": "m"}
        return {
            "job_id": "j",
            "name": "j",
            "status": status,
            "created_at": T0.isoformat(),
            "updated_at": T0.isoformat(),
            "error": error,
        }

    # When each is shown by `spotrun submit --wait`
    codes = []
    for status, error_type in [
        ("FAILED", "Budget.Exceeded"),
        ("FAILED", "Training.MaxRuntimeExceeded"),
        ("FAILED", "Training.Failed"),
    ]:
        with pytest.raises(typer.Exit) as ended:
            _show_ended(view(status, error_type), as_json=True)
        codes.append(ended.value.exit_code)
    # Then the exit code says which limit stopped it
    assert codes == [3, 4, 1]
    assert exit_code("SUCCEEDED", None) == 0


def test_a_job_stopped_at_a_limit_reads_as_such_in_the_listing():
    # Given a job finalized with Budget.Exceeded, and one that failed otherwise
    store = InMemoryJobStore()
    for job_id, error_type in (("tiny-0123456789ab", "Budget.Exceeded"), ("tiny-2", "Training.Failed")):
        job = new_job(job_id, "tiny", ManifestSource(key=job_id), manifest().model_dump(mode="json"), T0)
        store.create(job)
        finalize_job(
            job_id=job_id, outcome="FAILED", error={"Error": error_type, "Cause": "x"}, store=store, now=T0
        )
    # When the jobs are listed, through the API and in the CLI's table
    page = list_jobs(store, status=None, name=None, limit=10, next_token=None)
    table = Console(width=200, record=True)
    table.print(jobs_table([job.model_dump(mode="json") for job in page.jobs]))
    # Then each says how it failed
    assert {job.job_id: job.error_type for job in page.jobs} == {
        "tiny-0123456789ab": "Budget.Exceeded",
        "tiny-2": "Training.Failed",
    }
    assert "FAILED (Budget.Exceeded)" in table.export_text()


def _caught_by(state: dict, error: str) -> str:
    """The state a Task's Catch sends ``error`` to: the first catcher naming it, else States.ALL's."""
    for catcher in state["Catch"]:
        if error in catcher["ErrorEquals"] or catcher["ErrorEquals"] == ["States.ALL"]:
            return str(catcher["Next"])
    raise AssertionError(f"{error} is not caught")


def test_a_limit_ends_the_workflow_through_release_and_finalize_never_a_relaunch():
    # Given the job's state machine
    states = json.loads((REPO_ROOT / "statemachines" / "job.asl.json").read_text())["States"]
    # When a limit error comes from acquire, staging or training
    routes = {
        (name, error): _caught_by(states[name], error)
        for name in ("AcquireCapacity", "StageData", "Train")
        for error in ("Budget.Exceeded", "Training.MaxRuntimeExceeded")
    }
    # Then capacity is released and the job finalized with that error, which the execution fails with
    assert set(routes.values()) == {"ReleaseAfterFailure"}
    assert states["ReleaseAfterFailure"]["Next"] == "RecordFailure"
    assert states["RecordFailure"]["Parameters"]["Payload"]["error.$"] == "$.error"
    assert states["Failed"]["ErrorPath"] == "$.error.Error"

"""A command that died in the middle of its save on the warning: the record and the summary say so."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from functions import ec2_events, interrupted
from spotrun.cli.display.summary import final_summary
from spotrun.model.agent_protocol.command import FailureCause
from tests.integration import test_record_interruptions
from tests.integration.test_record_interruptions import record, resume, warning

# A job training on attempt 1, that committed step 500 and reported step 727: ``(job_id, instance_id)``.
training_job = test_record_interruptions.training_job

CRASH = "exit code 1 after SIGTERM, step 727 not saved: RuntimeError: DataLoader worker (pid 4242) is killed"


def rendered(job) -> str:
    console = Console(record=True, width=400)
    console.print(final_summary(job, datetime.now(UTC)))
    return console.export_text()


def test_a_command_that_died_during_its_save_is_recorded_and_summarised_with_the_steps_it_lost(
    deployment, training_job, lambda_context
):
    # Given a warned job (step 500 committed, step 727 reached) whose command crashed in its save on the signal
    job_id, instance_id = training_job
    ec2_events.handler(warning(instance_id), lambda_context)
    cause = FailureCause(
        message="spot interruption; the command stopped (exit code 1); checkpoint step 500 committed",
        exit_code=1,
        last_step=727,
        checkpoint_step=500,
        save_failed=CRASH,
    )
    error = {"Error": "Spot.Interrupted", "Cause": cause.model_dump_json()}

    # When the workflow records the interruption and the next attempt resumes from step 500
    interrupted.handler({"job_id": job_id, "error": error}, lambda_context)
    resume(job_id, 500, lambda_context)

    # Then the attempt holds the agent's word, beside the steps lost
    job = record(deployment, job_id)
    first = job.attempts[0]
    assert first.save_failed == CRASH
    assert (first.steps_lost, first.notice_checkpoint_committed) == (227, False)
    # and the summary says the command died during its save, not only that work was lost
    text = rendered(job)
    assert f"attempt 1: the command died during its save ({CRASH})" in text
    assert "resumed from an earlier checkpoint, 227 steps lost" in text


def test_a_save_that_made_it_says_nothing_of_a_crash(deployment, training_job, lambda_context):
    # Given a warned job whose command saved the step it reached
    job_id, instance_id = training_job
    ec2_events.handler(warning(instance_id), lambda_context)
    cause = FailureCause(message="spot interruption", exit_code=143, last_step=727, checkpoint_step=727)

    # When the interruption is recorded
    interrupted.handler(
        {"job_id": job_id, "error": {"Error": "Spot.Interrupted", "Cause": cause.model_dump_json()}},
        lambda_context,
    )

    # Then no crash is recorded or shown
    job = record(deployment, job_id)
    assert job.attempts[0].save_failed is None
    assert "died during its save" not in rendered(job)

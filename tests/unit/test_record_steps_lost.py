"""The steps an attempt lost, as the job record counts them (spotrun.model.job.attempt_end)."""

from datetime import UTC, datetime

from spotrun.model.job.attempt import Attempt
from spotrun.model.job.attempt_end import settle_steps_lost, steps_lost_fields
from spotrun.model.job.record import ManifestSource, new_job

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def attempt(number: int, **fields) -> Attempt:
    base = Attempt(
        number=number,
        instance_id=f"i-{number:04d}",
        instance_type="g4dn.xlarge",
        availability_zone="us-east-1a",
        lifecycle="spot",
        price_per_hour=0.2,
        started_at=T0,
    )
    return base.model_copy(update=fields)


def closed(number: int, last_step: int | None, committed_then: int | None, **fields) -> Attempt:
    """An attempt closed by a loss, its figure counted from the latest commit at the close."""
    lost = attempt(number, ended_at=T0, end_reason="instance-lost", **fields)
    return lost.model_copy(update=steps_lost_fields(lost, last_step, committed_then, final=False))


def job_of(*attempts: Attempt):
    job = new_job("tiny-0123456789ab", "tiny", ManifestSource(bucket="b", key="k", etag="e"), None, T0)
    return job.model_copy(update={"attempts": list(attempts)})


def test_the_figure_counted_at_the_close_is_provisional():
    # Given an attempt that reached step 727 when step 500 was the latest commit
    # When it is closed
    first = closed(1, 727, 500)
    # Then it lost 227 steps so far, provisionally
    assert (first.steps_lost, first.steps_lost_basis, first.notice_checkpoint_committed) == (
        227,
        "latest-commit",
        None,
    )


def test_the_restored_checkpoint_settles_every_earlier_provisional_attempt_and_no_settled_one():
    # Given attempt 1 settled (27 steps past the step 700 attempt 2 restored), attempt 2 lost at step 900
    # (commit 727 then, then one of 880 landed), attempt 3 lost while booting (no step), and attempt 4 staged
    # from the checkpoint of step 880
    job = job_of(
        closed(1, 727, 700).model_copy(update={"steps_lost": 27, "steps_lost_basis": "restored"}),
        closed(2, 900, 727, notice_at=T0),
        closed(3, None, 880),
        attempt(4, restored_step=880),
    )
    # When the figures are settled against it, twice (a redelivered dispatch)
    settled = settle_steps_lost(settle_steps_lost(job, 880), 880)
    # Then attempt 2 lost the 20 steps past step 880 (its notice's checkpoint did not commit); attempt 1 keeps
    # its figure, attempt 3 stays unknown
    first, second, third, _ = settled.attempts
    assert (first.steps_lost, first.steps_lost_basis) == (27, "restored")
    assert (second.steps_lost, second.steps_lost_basis, second.notice_checkpoint_committed) == (
        20,
        "restored",
        False,
    )
    assert (third.steps_lost, third.steps_lost_basis) == (None, None)


def test_a_next_attempt_that_restored_nothing_loses_every_step():
    # Given an attempt closed at step 40 with no checkpoint committed, warned
    job = job_of(closed(1, 40, None, notice_at=T0), attempt(2))
    # When the next attempt staged without a checkpoint
    [first, _] = settle_steps_lost(job, None).attempts
    # Then all 40 steps are lost, and the notice's checkpoint did not commit
    assert (first.steps_lost, first.notice_checkpoint_committed) == (40, False)

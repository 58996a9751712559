"""The agent's hang watch: training is hung once its reported step has not changed for the manifest's bound."""

from __future__ import annotations

import pytest

from spotrun.agent.supervision.hang import HangVerdict, HangWatch


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def watch(hang_seconds: float | None = 60.0) -> tuple[HangWatch, FakeClock]:
    clock = FakeClock()
    return HangWatch(hang_seconds, clock=clock, limit="training.hang_minutes 1"), clock


def test_no_step_reported_is_never_hung_however_long_it_takes():
    # Given a watch whose command has reported no step (setup, data loading, the first compile)
    hang, clock = watch()
    hang.observe(None)

    # When far more than the bound passes
    clock.advance(3600)

    # Then it is not hung
    assert hang.hung() is None


def test_a_step_that_does_not_change_for_the_bound_is_a_hang():
    # Given step 41 reported, and reported again at every poll
    hang, clock = watch()
    hang.observe(41)
    for _ in range(59):
        clock.advance(1)
        hang.observe(41)

    # When the bound is not yet reached, then reached
    before = hang.hung()
    clock.advance(3)
    after = hang.hung()

    # Then it is hung only then, at step 41, for the time since 41 was first reported
    assert before is None
    assert after == HangVerdict(step=41, stalled_seconds=62.0, limit="training.hang_minutes 1")
    assert after.describe() == "steps stopped advancing at step 41 for 62 s (training.hang_minutes 1)"


def test_a_step_that_advances_is_progress():
    # Given step 41 reported 50 s ago
    hang, clock = watch()
    hang.observe(41)
    clock.advance(50)

    # When step 42 is reported and 50 s more pass
    hang.observe(42)
    clock.advance(50)

    # Then it is not hung: 42 is 50 s old
    assert hang.hung() is None
    clock.advance(10)
    verdict = hang.hung()
    assert verdict is not None
    assert (verdict.step, verdict.stalled_seconds) == (42, 60.0)


def test_a_step_that_goes_back_is_progress_too():
    # Given step 41 reported 50 s ago
    hang, clock = watch()
    hang.observe(41)
    clock.advance(50)

    # When the command restarted from its checkpoint at step 30 and 50 s more pass
    hang.observe(30)
    clock.advance(50)

    # Then it is not hung
    assert hang.hung() is None


def test_a_missing_reading_after_a_step_changes_nothing():
    # Given step 41 reported, then polls that read no step
    hang, clock = watch()
    hang.observe(41)
    clock.advance(30)
    hang.observe(None)
    clock.advance(30)

    # When / Then it is hung at 41
    verdict = hang.hung()
    assert verdict is not None
    assert verdict.step == 41


def test_without_a_bound_it_is_never_hung():
    # Given a watch without hang_seconds (a one-node job without training.hang_minutes)
    hang, clock = watch(None)
    hang.observe(41)

    # When a day passes
    clock.advance(86400)

    # Then it is not hung
    assert hang.hung() is None


@pytest.mark.parametrize("bad", [0.0, -5.0])
def test_a_bound_that_is_not_positive_is_refused(bad):
    with pytest.raises(ValueError, match="hang_seconds must be positive"):
        HangWatch(bad)


def test_the_default_limit_names_the_seconds():
    # Given a watch told no limit name
    clock = FakeClock()
    hang = HangWatch(90, clock=clock)
    hang.observe(7)
    clock.advance(90)

    # When / Then the message names the bound in seconds
    verdict = hang.hung()
    assert verdict is not None
    assert verdict.describe() == "steps stopped advancing at step 7 for 90 s (hang limit 90 s)"


def test_a_restarted_command_waits_for_its_own_first_step():
    # Given a run that reported step 41, then crashed and was started again
    hang, clock = watch()
    hang.observe(41)
    clock.advance(10)
    hang.command_started()

    # When the new run sets up for longer than the bound, the progress file still saying 41
    for _ in range(120):
        clock.advance(1)
        hang.observe(41)

    # Then it is not hung: 41 is the last run's step
    assert hang.hung() is None

    # When the new run reports its first step (it resumed at 40) and then stalls there
    hang.observe(40)
    clock.advance(60)

    # Then it is hung at 40
    verdict = hang.hung()
    assert verdict is not None
    assert (verdict.step, verdict.stalled_seconds) == (40, 60.0)


def test_a_restart_before_any_step_leaves_nothing_over():
    # Given a first run that crashed before reporting any step, and was started again
    hang, clock = watch()
    hang.command_started()

    # When the new run reports step 0 and stalls there
    hang.observe(0)
    clock.advance(60)

    # Then it is hung at 0
    verdict = hang.hung()
    assert verdict is not None
    assert verdict.step == 0


def test_gpu_readings_during_the_stall_are_reported_not_judged():
    # Given GPU readings before the first step, during step 40, and during step 41
    hang, clock = watch()
    hang.observe_gpu(0.0)  # setup: not part of any stall
    hang.observe(40)
    hang.observe_gpu(99.0)  # step 40 ran: not part of 41's stall
    clock.advance(5)
    hang.observe(41)
    hang.observe_gpu(None)
    hang.observe_gpu(3.0)
    clock.advance(20)
    hang.observe_gpu(0.0)

    # When the bound is not reached, GPUs idle
    clock.advance(20)

    # Then idle GPUs alone are not a hang
    assert hang.hung() is None

    # When the bound is reached
    clock.advance(20)
    verdict = hang.hung()

    # Then the verdict shows the readings taken since 41 was reported
    assert verdict is not None
    assert verdict.gpu_utilization == (0.0, 3.0)
    assert verdict.describe() == (
        "steps stopped advancing at step 41 for 60 s (training.hang_minutes 1); GPU utilisation meanwhile 0-3 %"
    )


def test_one_gpu_reading_is_shown_as_one_value():
    verdict = HangVerdict(step=5, stalled_seconds=61.4, limit="x", gpu_utilization=(100.0, 100.0))
    assert (
        verdict.describe()
        == "steps stopped advancing at step 5 for 61 s (x); GPU utilisation meanwhile 100 %"
    )


def test_a_restart_forgets_the_gpu_readings_of_the_last_run():
    # Given a run that stalled at 41 with busy GPUs, then was started again
    hang, clock = watch()
    hang.observe(41)
    hang.observe_gpu(100.0)
    hang.command_started()

    # When the new run reports 40 and stalls without a reading
    hang.observe(40)
    clock.advance(60)

    # Then the verdict has no GPU readings
    verdict = hang.hung()
    assert verdict is not None
    assert verdict.gpu_utilization is None

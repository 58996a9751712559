"""The agent's hang watch: training is hung once its reported step has not changed for the manifest's bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotrun.agent.supervision.hang import HangVerdict, HangWatch


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Script:
    """Writes the progress file as ``Run.report_step`` does."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def report(self, step: int) -> None:
        self.path.write_text(f"{step}\n")


def watch(tmp_path: Path, hang_seconds: float | None = 60.0) -> tuple[HangWatch, FakeClock, Script]:
    clock = FakeClock()
    path = tmp_path / "progress-attempt-001"
    hang = HangWatch(hang_seconds, path, clock=clock, limit="training.hang_minutes 1")
    hang.command_started()
    return hang, clock, Script(path)


def poll_every_second(hang: HangWatch, clock: FakeClock, seconds: int) -> list[HangVerdict | None]:
    """The supervisor's ticks: ask once a second."""
    verdicts = []
    for _ in range(seconds):
        clock.advance(1)
        verdicts.append(hang.hung())
    return verdicts


def test_no_step_reported_is_never_hung_however_long_it_takes(tmp_path):
    # Given a command that has reported no step (setup, data loading, the first compile)
    hang, clock, _ = watch(tmp_path)

    # When far more than the bound passes
    verdicts = poll_every_second(hang, clock, 3600)

    # Then it is never hung
    assert set(verdicts) == {None}


def test_a_step_that_does_not_change_for_the_bound_is_a_hang(tmp_path):
    # Given step 41 reported, and the supervisor asking every second
    hang, clock, script = watch(tmp_path)
    script.report(41)
    before = hang.hung()
    verdicts = poll_every_second(hang, clock, 59)

    # When 62 s have passed since 41 was first seen
    clock.advance(3)
    after = hang.hung()

    # Then it is hung only then, at step 41, for the time since 41 was first seen
    assert before is None
    assert set(verdicts) == {None}
    assert after == HangVerdict(step=41, stalled_seconds=62.0, limit="training.hang_minutes 1")
    assert after.describe() == "steps stopped advancing at step 41 for 62 s (training.hang_minutes 1)"


def test_a_step_that_advances_is_progress(tmp_path):
    # Given step 41 seen 50 s ago
    hang, clock, script = watch(tmp_path)
    script.report(41)
    hang.hung()
    clock.advance(50)

    # When step 42 is reported and 50 s more pass
    script.report(42)
    hang.hung()
    clock.advance(50)

    # Then it is not hung: 42 is 50 s old; it is 10 s later
    assert hang.hung() is None
    clock.advance(10)
    verdict = hang.hung()
    assert verdict is not None
    assert (verdict.step, verdict.stalled_seconds) == (42, 60.0)


def test_a_step_that_goes_back_is_progress_too(tmp_path):
    # Given step 41 seen 50 s ago
    hang, clock, script = watch(tmp_path)
    script.report(41)
    hang.hung()
    clock.advance(50)

    # When the command went back to its checkpoint at step 30 and 50 s more pass
    script.report(30)
    hang.hung()
    clock.advance(50)

    # Then it is not hung
    assert hang.hung() is None


def test_a_progress_file_gone_after_a_step_changes_nothing(tmp_path):
    # Given step 41 seen, then the file gone
    hang, clock, script = watch(tmp_path)
    script.report(41)
    hang.hung()
    script.path.unlink()

    # When the bound passes
    clock.advance(60)

    # Then it is hung at 41
    verdict = hang.hung()
    assert verdict is not None
    assert verdict.step == 41


def test_without_a_bound_it_is_never_hung(tmp_path):
    # Given a watch without hang_seconds (a one-node job without training.hang_minutes)
    hang, clock, script = watch(tmp_path, None)
    script.report(41)
    hang.hung()

    # When a day passes
    clock.advance(86400)

    # Then it is not hung
    assert hang.hung() is None


@pytest.mark.parametrize("bad", [0.0, -5.0])
def test_a_bound_that_is_not_positive_is_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="hang_seconds must be positive"):
        HangWatch(bad, tmp_path / "progress")


def test_the_default_limit_names_the_seconds(tmp_path):
    # Given a watch told no limit name
    clock = FakeClock()
    hang = HangWatch(90, tmp_path / "progress", clock=clock)
    Script(tmp_path / "progress").report(7)
    hang.hung()
    clock.advance(90)

    # When / Then the message names the bound in seconds
    verdict = hang.hung()
    assert verdict is not None
    assert verdict.describe() == "steps stopped advancing at step 7 for 90 s (hang limit 90 s)"


def test_a_restarted_command_waits_for_its_own_first_step(tmp_path):
    # Given a run that wrote step 41 just before it crashed, before the watch saw it, and was started again
    hang, clock, script = watch(tmp_path)
    script.report(40)
    hang.hung()
    script.report(41)
    hang.command_started()

    # When the new run sets up for longer than the bound, the progress file still saying 41
    verdicts = poll_every_second(hang, clock, 120)

    # Then it is not hung: 41 is the last run's step
    assert set(verdicts) == {None}

    # When the new run reports its first step (it resumed at 40) and then stalls there
    script.report(40)
    hang.hung()
    clock.advance(60)

    # Then it is hung at 40
    verdict = hang.hung()
    assert verdict is not None
    assert (verdict.step, verdict.stalled_seconds) == (40, 60.0)


def test_a_restart_before_any_step_leaves_nothing_over(tmp_path):
    # Given a first run that crashed before reporting any step, and was started again
    hang, clock, script = watch(tmp_path)
    hang.command_started()

    # When the new run reports step 0 and stalls there
    script.report(0)
    hang.hung()
    clock.advance(60)

    # Then it is hung at 0
    verdict = hang.hung()
    assert verdict is not None
    assert verdict.step == 0


def test_gpu_readings_during_the_stall_are_reported_not_judged(tmp_path):
    # Given GPU readings during step 40, then during step 41
    hang, clock, script = watch(tmp_path)
    script.report(40)
    hang.observe_gpu(99.0)  # step 40 ran: not part of 41's stall
    clock.advance(5)
    script.report(41)
    hang.observe_gpu(3.0)  # the first reading after 41 was written, before the supervisor's next tick
    hang.observe_gpu(None)
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


def test_a_restart_forgets_the_gpu_readings_of_the_last_run(tmp_path):
    # Given a run that stalled at 41 with busy GPUs, then was started again
    hang, clock, script = watch(tmp_path)
    script.report(41)
    hang.observe_gpu(100.0)
    hang.command_started()

    # When the new run reports 40 and stalls without a reading
    script.report(40)
    hang.hung()
    clock.advance(60)

    # Then the verdict has no GPU readings
    verdict = hang.hung()
    assert verdict is not None
    assert verdict.gpu_utilization is None

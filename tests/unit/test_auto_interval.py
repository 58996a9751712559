"""checkpoint.interval_steps: auto: the field, the helper's time-based due, the save time, the agent's choice."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from spotrun import training
from spotrun.agent.supervision.interval import IntervalAdvisor, choose_interval
from spotrun.agent.supervision.progress import read_progress
from spotrun.model.checkpoint_interval import auto_interval
from spotrun.model.job.interruption_rate import PoolRate
from spotrun.model.manifest.parse import ManifestError, parse_manifest_text
from spotrun.training.files import DEFAULT_FIRST_INTERVAL_SECONDS

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
JOB_ID = "tiny-0123456789ab"


def manifest_text(checkpoint: str) -> str:
    return f"name: tiny\ntraining:\n  command: [python, t.py]\n  checkpoint: {checkpoint}\n"


class Clock:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the field ---------------------------------------------------------------------------------------------


def test_auto_is_accepted_with_a_default_cap_and_a_given_one():
    # Given / When manifests asking for auto, with and without a cap
    plain = parse_manifest_text(manifest_text("{interval_steps: auto}")).training.checkpoint
    capped = parse_manifest_text(manifest_text("{interval_steps: auto, max_interval_minutes: 30}"))
    # Then auto is on, the cap is 4 h unless given
    assert plain.auto
    assert plain.interval_steps == "auto"
    assert plain.max_interval_hours == 4.0
    assert capped.training.checkpoint.max_interval_hours == 0.5


@pytest.mark.parametrize(
    ("checkpoint", "message"),
    [
        ("{interval_steps: often}", "must be a number of steps (1 or more) or 'auto', got 'often'"),
        ("{interval_steps: true}", "got True"),
        ("{interval_steps: 2.5}", "got 2.5"),
        ("{interval_steps: 50, max_interval_minutes: 30}", "max_interval_minutes bounds the 'auto' interval"),
        ("{max_interval_minutes: 30}", "max_interval_minutes bounds the 'auto' interval"),
        ("{interval_steps: 0}", "got 0"),
    ],
)
def test_contradictions_and_bad_values_are_refused_naming_the_field(checkpoint, message):
    # Given a checkpoint section that contradicts itself or says nothing valid
    # When it is parsed / Then it is refused with the message
    with pytest.raises(ManifestError, match="checkpoint") as raised:
        parse_manifest_text(manifest_text(checkpoint))
    assert message in str(raised.value)


def test_a_step_count_reads_as_before_auto_existed():
    # Given step counts written as an integer and as an integral float
    # When / Then both are that many steps
    assert parse_manifest_text(manifest_text("{interval_steps: 60}")).training.checkpoint.interval_steps == 60
    assert (
        parse_manifest_text(manifest_text("{interval_steps: 60.0}")).training.checkpoint.interval_steps == 60
    )


def test_an_auto_manifest_survives_the_records_round_trip():
    # Given an auto manifest stored as its JSON form (as the job record keeps it)
    document = parse_manifest_text(manifest_text("{interval_steps: auto, max_interval_minutes: 30}"))
    # When it is read back through the same validation
    again = type(document).model_validate(document.model_dump(mode="json"))
    # Then it is the same
    assert again == document


# -- the helper's time-based due ---------------------------------------------------------------------------


def auto_run(tmp_path: Path, clock: Clock, **extra: object) -> training.Run:
    return training.Run(
        data_dir=tmp_path / "data",
        code_dir=tmp_path,
        checkpoint_dir=tmp_path / "checkpoints",
        output_dir=tmp_path / "output",
        checkpoint_interval_file=tmp_path / "interval",
        clock=clock,
        **extra,  # type: ignore[arg-type]
    )


def test_the_due_is_time_based_from_the_agents_file_and_restarts_at_each_save(tmp_path):
    # Given an auto run whose agent says 30 s, and a clock it reads
    clock = Clock()
    (tmp_path / "interval").write_text("30.000\n")
    run = auto_run(tmp_path, clock)
    # When time passes: 29 s, then 30 s, then a save, then 29 s and 30 s more
    clock.now += 29
    before = run.checkpoint_due(7)
    clock.now += 1
    at = run.checkpoint_due(8)
    run.save_checkpoint(8, lambda directory: (directory / "s").write_text("x"))
    clock.now += 29
    after_save = run.checkpoint_due(9)
    clock.now += 1
    next_due = run.checkpoint_due(10)
    # Then it is due exactly an interval after the start and after the save, whatever the step count
    assert (before, at, after_save, next_due) == (False, True, False, True)


def test_before_the_agent_wrote_a_number_the_safe_default_applies_and_a_rewrite_is_picked_up(tmp_path):
    # Given an auto run with no interval file yet
    clock = Clock()
    run = auto_run(tmp_path, clock)
    # When the default passes less a second; then the agent writes 60 s and two seconds pass
    clock.now += DEFAULT_FIRST_INTERVAL_SECONDS - 1
    default_not_yet = run.checkpoint_due(1)
    (tmp_path / "interval").write_text("60\n")
    clock.now += 2
    rewritten = run.checkpoint_due(2)
    # Then the default held, and the new (shorter) interval is used at the next read
    assert default_not_yet is False
    assert rewritten is True


def test_without_the_interval_file_the_due_stays_step_based(tmp_path):
    # Given a run built from an environment without SPOTRUN_CHECKPOINT_INTERVAL_FILE
    run = training.Run.from_env(
        {"SPOTRUN_CHECKPOINT_DIR": str(tmp_path / "c"), "SPOTRUN_CHECKPOINT_INTERVAL_STEPS": "5"},
        output_dir=tmp_path / "o",
        handle_signal=False,
    )
    # When / Then the step multiples decide
    assert [step for step in range(1, 12) if run.checkpoint_due(step)] == [5, 10]


def test_from_env_reads_the_interval_file_variable(tmp_path):
    # Given the variable the agent sets under auto, and a file saying 5 s
    (tmp_path / "interval").write_text("5\n")
    run = training.Run.from_env(
        {
            "SPOTRUN_CHECKPOINT_DIR": str(tmp_path / "c"),
            "SPOTRUN_CHECKPOINT_INTERVAL_FILE": str(tmp_path / "interval"),
        },
        output_dir=tmp_path / "o",
        handle_signal=False,
    )
    # When / Then the run is time-based on that file (step 100, the step default, is no longer due)
    assert run.checkpoint_interval_file == tmp_path / "interval"
    assert run.checkpoint_due(100) is False


# -- the save time ------------------------------------------------------------------------------------------


def test_the_save_time_reaches_the_progress_file_and_the_agent_reads_it(tmp_path):
    # Given a run with a progress file, whose writer takes 2.5 s of its clock
    clock = Clock()
    run = auto_run(tmp_path, clock, progress_file=tmp_path / "progress")

    def writer(directory: Path) -> None:
        (directory / "s").write_text("x")
        clock.now += 2.5

    # When it saves step 4
    run.save_checkpoint(4, writer)
    # Then the progress file says the step and the save's seconds, and the agent reads both
    found = read_progress(tmp_path / "progress")
    assert found is not None
    assert (found.step, found.save_seconds) == (4, pytest.approx(2.5))


def test_a_progress_file_of_the_old_form_still_reads_without_a_save_time(tmp_path):
    # Given a progress file holding only a step
    (tmp_path / "progress").write_text("12\n")
    # When / Then it reads as the step, no save time
    found = read_progress(tmp_path / "progress")
    assert found is not None
    assert (found.step, found.save_seconds) == (12, None)


# -- the agent's choice -------------------------------------------------------------------------------------

RATE = PoolRate(interruptions_per_hour=0.5, silent_fraction=0.1, basis="test pool")


def test_a_save_inside_the_notice_counts_only_silent_interruptions():
    # Given a 30 s save (inside the 2-minute notice) and a pool of 0.5 interruptions/h, 10 % silent
    chosen = choose_interval(30.0, RATE, max_interval_hours=100)
    # Then the interval is Daly's for M = 1 / (0.5 x 0.1) = 20 h, and the why says so
    expected = auto_interval(30 / 3600, 20.0, 100).interval_hours * 3600
    assert chosen.interval_seconds == pytest.approx(expected)
    assert chosen.save_seconds == 30.0
    assert "the notice covers the save" in chosen.why
    assert "20.00 h" in chosen.why
    assert "test pool" in chosen.why


def test_a_save_longer_than_the_notice_counts_every_interruption():
    # Given a 5-minute save: the notice covers nothing
    chosen = choose_interval(300.0, RATE, max_interval_hours=100)
    # Then M = 1 / 0.5 = 2 h
    expected = auto_interval(300 / 3600, 2.0, 100).interval_hours * 3600
    assert chosen.interval_seconds == pytest.approx(expected)
    assert "outlasts the 2-minute notice" in chosen.why


def test_an_upload_that_pushes_the_final_save_past_the_notice_counts_every_interruption():
    # Given a 100 s save (inside the notice) whose upload takes 30 s (the two are not)
    inside = choose_interval(100.0, RATE, max_interval_hours=100)
    past = choose_interval(100.0, RATE, max_interval_hours=100, upload_seconds=30.0)
    # Then the save alone is covered (M = 20 h) and with its upload it is not (M = 2 h); C is the save either way
    assert inside.interval_seconds == pytest.approx(
        auto_interval(100 / 3600, 20.0, 100).interval_hours * 3600
    )
    assert past.interval_seconds == pytest.approx(auto_interval(100 / 3600, 2.0, 100).interval_hours * 3600)
    assert "the save and its upload outlast the 2-minute notice" in past.why


def test_the_advisor_ignores_a_new_upload_time_that_changes_nothing(tmp_path):
    # Given an advisor that saw a 10 s save uploaded in 5 s
    advisor = IntervalAdvisor(tmp_path / "interval", RATE, max_interval_hours=100)
    advisor.update(10.0, 5.0)
    # When the next upload takes 6 s (still inside the notice), then 200 s (past it)
    same = advisor.update(10.0, 6.0)
    moved = advisor.update(10.0, 200.0)
    # Then only the second rewrites the interval
    assert (same, moved) == (False, True)


def test_the_first_upload_measured_enters_the_why_though_the_interval_stays(tmp_path):
    # Given an advisor that saw a 10 s save before any upload
    advisor = IntervalAdvisor(tmp_path / "interval", RATE, max_interval_hours=100)
    advisor.update(10.0)
    # When the first upload, 5 s, is measured (still inside the notice)
    rewritten = advisor.update(10.0, 5.0)
    # Then the file stays, and the why the record keeps now names the upload
    assert rewritten is False
    assert advisor.current is not None
    assert "the notice covers the save and its upload" in advisor.current.why


def test_no_silent_interruption_gives_the_cap_and_no_measurement_the_default():
    # Given a pool whose interruptions all come with the notice
    reliable = PoolRate(interruptions_per_hour=2.0, silent_fraction=0.0, basis="b")
    # When / Then the interval is the cap; before any save, the default
    assert choose_interval(10.0, reliable, max_interval_hours=1.5).interval_seconds == 5400
    first = choose_interval(None, reliable, max_interval_hours=1.5)
    assert first.interval_seconds == DEFAULT_FIRST_INTERVAL_SECONDS
    assert "no save measured yet" in first.why


def test_the_advisor_rewrites_the_file_only_when_the_measurement_moves_the_interval(tmp_path):
    # Given an advisor on a file
    advisor = IntervalAdvisor(tmp_path / "interval", RATE, max_interval_hours=100)
    # When it starts, sees a 30 s save, sees it again, then a 60 s save
    wrote = [advisor.update(None), advisor.update(30.0), advisor.update(30.0)]
    after_30 = float((tmp_path / "interval").read_text())
    wrote.append(advisor.update(60.0))
    after_60 = float((tmp_path / "interval").read_text())
    # Then the file follows each new measurement, and a repeated one writes nothing
    assert wrote == [True, True, False, True]
    assert after_30 == pytest.approx(choose_interval(30.0, RATE, 100).interval_seconds, abs=0.001)
    assert after_60 > after_30
    assert advisor.current is not None
    assert advisor.current.save_seconds == 60.0

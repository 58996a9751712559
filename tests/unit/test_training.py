"""spotrun.training: the checkpoint contract as user scripts see it."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from spotrun import training
from spotrun.model import layout
from spotrun.training import files


def make_run(tmp_path: Path, **overrides: object) -> training.Run:
    values: dict[str, object] = {
        "data_dir": tmp_path / "data",
        "code_dir": tmp_path,
        "checkpoint_dir": tmp_path / "checkpoints",
        "output_dir": tmp_path / "output",
        "checkpoint_interval_steps": 50,
    }
    values.update(overrides)
    return training.Run(**values)  # type: ignore[arg-type]


def write_marker(directory: Path, text: str = "state") -> None:
    (directory / "state.txt").write_text(text)


def test_from_env_reads_the_contract_and_creates_the_directories(tmp_path):
    # Given the variables the agent sets
    environ = {
        "SPOTRUN_JOB_ID": "j-1",
        "SPOTRUN_ATTEMPT": "3",
        "SPOTRUN_DATA_DIR": str(tmp_path / "d"),
        "SPOTRUN_CODE_DIR": str(tmp_path / "c"),
        "SPOTRUN_CHECKPOINT_DIR": str(tmp_path / "ck"),
        "SPOTRUN_OUTPUT_DIR": str(tmp_path / "o"),
        "SPOTRUN_CHECKPOINT_INTERVAL_STEPS": "25",
        "SPOTRUN_CHECKPOINT_SIGNAL": "SIGUSR1",
        "SPOTRUN_MODEL": "weights/model.bin",
    }

    # When a script builds its run, giving its own fallbacks
    run = training.Run.from_env(
        environ,
        data_dir="elsewhere",
        checkpoint_interval_steps=50,
        model_name="model.npy",
        handle_signal=False,
    )

    # Then the contract wins over the fallbacks
    assert run.job_id == "j-1"
    assert run.attempt == 3
    assert run.data_dir == tmp_path / "d"
    assert run.code_dir == tmp_path / "c"
    assert run.checkpoint_interval_steps == 25
    assert run.checkpoint_signal == signal.SIGUSR1
    assert run.model_path == tmp_path / "o" / "weights" / "model.bin"
    assert run.checkpoint_dir.is_dir()
    assert run.output_dir.is_dir()


def test_from_env_without_the_contract_uses_arguments_then_directories_under_cwd(tmp_path, monkeypatch):
    # Given a script run directly, in tmp_path
    monkeypatch.chdir(tmp_path)

    # When it builds its run with only a data directory
    run = training.Run.from_env({}, data_dir="my-data", checkpoint_interval_steps=10, handle_signal=False)

    # Then the argument and the defaults apply
    assert run.job_id is None
    assert run.attempt == 1
    assert run.data_dir == tmp_path / "my-data"
    assert run.checkpoint_dir == tmp_path / "checkpoints"
    assert run.output_dir == tmp_path / "output"
    assert run.checkpoint_interval_steps == 10
    assert run.checkpoint_signal == signal.SIGTERM


def test_an_unknown_signal_name_is_rejected(tmp_path):
    # Given / When / Then
    with pytest.raises(ValueError, match="SIGNOPE"):
        training.Run.from_env(
            {"SPOTRUN_CHECKPOINT_SIGNAL": "SIGNOPE"}, checkpoint_dir=tmp_path, handle_signal=False
        )


@pytest.mark.parametrize(
    ("step", "due"),
    [(0, False), (1, False), (49, False), (50, True), (51, False), (100, True), (150, True)],
)
def test_checkpoint_due_on_positive_multiples_of_the_interval(tmp_path, step, due):
    # Given a run checkpointing every 50 steps
    run = make_run(tmp_path)

    # When / Then
    assert run.checkpoint_due(step) is due


def test_save_checkpoint_writes_into_a_hidden_directory_then_renames_it(tmp_path):
    # Given a run
    run = make_run(tmp_path)
    seen: list[Path] = []

    def writer(directory: Path) -> None:
        seen.append(directory)
        # While the writer runs, nothing under a final name exists: the agent cannot pick it up early.
        assert run.latest_checkpoint() is None
        write_marker(directory)

    # When it saves step 50
    path = run.save_checkpoint(50, writer)

    # Then the writer got a hidden temporary directory, and the result has the final name
    assert seen[0].name.startswith(".")
    assert seen[0].parent == run.checkpoint_dir
    assert path == run.checkpoint_dir / layout.checkpoint_name(50)
    assert (path / "state.txt").read_text() == "state"
    assert not seen[0].exists()
    assert run.latest_checkpoint() == training.Checkpoint(50, path)


def test_a_failing_writer_leaves_no_checkpoint_and_no_temporary(tmp_path):
    # Given a writer that fails halfway
    run = make_run(tmp_path)

    def writer(directory: Path) -> None:
        write_marker(directory)
        raise OSError("disk full")

    # When the save fails
    with pytest.raises(OSError, match="disk full"):
        run.save_checkpoint(50, writer)

    # Then nothing is left behind
    assert list(run.checkpoint_dir.iterdir()) == []


def test_latest_checkpoint_ignores_temporaries_and_other_names(tmp_path):
    # Given complete checkpoints, a temporary one of a newer step, and unrelated entries
    run = make_run(tmp_path)
    run.save_checkpoint(100, write_marker)
    run.save_checkpoint(50, write_marker)
    (run.checkpoint_dir / f".{layout.checkpoint_name(150)}.tmp-1-x").mkdir()
    (run.checkpoint_dir / "notes").mkdir()
    (run.checkpoint_dir / layout.checkpoint_name(200)).write_text("a file, not a directory")

    # When / Then
    latest = run.latest_checkpoint()
    assert latest is not None
    assert latest.step == 100
    assert run.checkpoint_step(latest.path) == 100
    assert [c.step for c in run.checkpoints()] == [50, 100]


def test_only_the_newest_keep_local_checkpoints_stay_on_disk(tmp_path):
    # Given a run keeping 2 checkpoints locally
    run = make_run(tmp_path, keep_local=2)

    # When it saves four
    for step in (50, 100, 150, 200):
        run.save_checkpoint(step, write_marker)

    # Then the two newest remain
    assert [c.step for c in run.checkpoints()] == [150, 200]


def test_saving_a_step_again_keeps_the_first_checkpoint(tmp_path):
    # Given a checkpoint of step 50
    run = make_run(tmp_path)
    first = run.save_checkpoint(50, lambda d: write_marker(d, "first"))

    # When step 50 is saved again
    second = run.save_checkpoint(50, lambda d: write_marker(d, "second"))

    # Then the first one is kept (the agent may be uploading it)
    assert second == first
    assert (first / "state.txt").read_text() == "first"


def test_stale_temporaries_of_a_dead_process_are_removed_on_the_next_save(tmp_path):
    # Given the leftover of a process killed during a save
    run = make_run(tmp_path)
    run.checkpoint_dir.mkdir(parents=True)
    stale = run.checkpoint_dir / f".{layout.checkpoint_name(40)}.tmp-999999-abc"
    stale.mkdir()

    # When this process saves
    run.save_checkpoint(50, write_marker)

    # Then the leftover is gone
    assert not stale.exists()


def test_the_checkpoint_signal_sets_stop_requested(tmp_path):
    # Given a run whose checkpoint signal is SIGUSR1, with its handler installed
    run = make_run(tmp_path, checkpoint_signal=signal.SIGUSR1)
    run.install_signal_handler()
    try:
        assert run.stop_requested is False

        # When the signal arrives
        os.kill(os.getpid(), signal.SIGUSR1)

        # Then the run asks the loop to stop, and the process lives on
        assert run.stop_requested is True
    finally:
        run.restore_signal_handler()
    assert signal.getsignal(signal.SIGUSR1) is not run._on_signal


def test_exit_for_preemption_exits_non_zero_with_128_plus_the_signal(tmp_path):
    # Given a run stopped by its checkpoint signal
    run = make_run(tmp_path, checkpoint_signal=signal.SIGTERM)
    run.request_stop()

    # When it exits for preemption
    with pytest.raises(SystemExit) as exited:
        run.exit_for_preemption()

    # Then the status says "not finished"
    assert exited.value.code == 128 + signal.SIGTERM


def test_save_model_writes_atomically_under_the_model_name(tmp_path):
    # Given a run whose model is model.npy
    run = make_run(tmp_path, model_name="model.npy")
    seen: list[Path] = []

    def writer(path: Path) -> None:
        seen.append(path)
        path.write_bytes(b"weights")

    # When it saves the model
    path = run.save_model(writer)

    # Then the writer got a temporary path keeping the name's suffix, now renamed into place
    assert seen[0].name.endswith("model.npy")
    assert seen[0].name.startswith(".")
    assert path == run.output_dir / "model.npy"
    assert path.read_bytes() == b"weights"
    assert sorted(p.name for p in run.output_dir.iterdir()) == ["model.npy"]


def test_save_model_fails_when_the_writer_writes_nothing(tmp_path):
    # Given a writer that forgets to write
    run = make_run(tmp_path, model_name="model.npy")

    # When / Then
    with pytest.raises(FileNotFoundError):
        run.save_model(lambda path: None)
    assert not run.model_path.exists()


def test_checkpoint_names_sort_by_step_and_round_trip():
    # Given / When
    names = [layout.checkpoint_name(step) for step in (5, 50, 500, 5000)]

    # Then zero padding makes lexical order the step order, and the name gives the step back
    assert names == sorted(names)
    assert [layout.checkpoint_step(name) for name in names] == [5, 50, 500, 5000]
    assert layout.checkpoint_step("step-abc") is None
    assert layout.checkpoint_step(".step-000000000005.tmp") is None
    assert layout.commit_marker_key("j", 5) == "jobs/j/checkpoints/step-000000000005/_COMMITTED.json"


# -- progress ---------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(files, "_clock", fake)
    return fake


def progress_of(path: Path) -> str:
    return path.read_text().strip()


def test_checkpoint_due_reports_the_step_to_the_progress_file_the_agent_gives(tmp_path):
    # Given the agent's contract, with a progress file
    progress = tmp_path / "runtime" / "progress-attempt-001"
    progress.parent.mkdir()
    environ = {"SPOTRUN_CHECKPOINT_DIR": str(tmp_path / "ck"), "SPOTRUN_PROGRESS_FILE": str(progress)}
    run = training.Run.from_env(environ, handle_signal=False)

    # When the script asks whether step 7 is a checkpoint step
    run.checkpoint_due(7)

    # Then step 7 is in the file, written whole (no temporary left beside it)
    assert run.progress_file == progress
    assert progress_of(progress) == "7"
    assert sorted(p.name for p in progress.parent.iterdir()) == ["progress-attempt-001"]


def test_progress_is_written_at_most_every_tenth_of_a_second_and_held_steps_are_flushed(tmp_path, clock):
    # Given a run with a progress file
    progress = tmp_path / "progress"
    run = make_run(tmp_path, progress_file=progress)

    # When steps come faster than ten a second
    run.report_step(1)
    clock.now += 0.05
    run.report_step(2)

    # Then the second is held
    assert progress_of(progress) == "1"

    # When time passes, the next step is written; a save writes at once; so does a flush
    clock.now += 0.06
    run.report_step(3)
    assert progress_of(progress) == "3"
    clock.now += 0.01
    run.save_checkpoint(4, write_marker)
    assert progress_of(progress) == "4"
    run.report_step(5)
    assert progress_of(progress) == "4"
    run.flush_progress()
    assert progress_of(progress) == "5"


def test_exit_for_preemption_writes_the_held_step(tmp_path, clock):
    # Given a step held back by the throttle
    progress = tmp_path / "progress"
    run = make_run(tmp_path, progress_file=progress)
    run.report_step(10)
    run.report_step(11)

    # When the run exits for preemption
    with pytest.raises(SystemExit):
        run.exit_for_preemption()

    # Then the agent sees the last step
    assert progress_of(progress) == "11"


def test_without_the_variable_nothing_is_written(tmp_path, monkeypatch):
    # Given a script run directly
    monkeypatch.chdir(tmp_path)
    run = training.Run.from_env({}, handle_signal=False, checkpoint_interval_steps=1)

    # When it reports steps and saves
    run.checkpoint_due(1)
    run.report_step(2, force=True)
    run.save_checkpoint(2, write_marker)

    # Then only its own directories exist
    assert run.progress_file is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints", "output"]


def test_an_unwritable_progress_file_does_not_stop_training(tmp_path, capsys):
    # Given a progress file in a directory that does not exist
    run = make_run(tmp_path, progress_file=tmp_path / "missing" / "progress")

    # When steps are reported
    run.report_step(1)
    run.report_step(2, force=True)

    # Then training goes on, with one warning
    assert run.checkpoint_due(50) is True
    assert capsys.readouterr().err.count("cannot write progress") == 1

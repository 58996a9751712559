"""The deadline's work learnt from progress (spotrun.model.deadline.work), and the manifest's rule for it:
with a deadline, exactly one of training.expected_hours / training.total_steps."""

from __future__ import annotations

from typing import Any

import pytest

from spotrun.model.deadline.work import ESTIMATE_AFTER_HOURS, StepsDone, from_manifest, from_progress
from spotrun.model.manifest.schema import JobManifest
from tests.unit.test_manifest_schema import model_accepts, schema_accepts


def test_the_work_is_the_steps_at_the_measured_rate() -> None:
    # Given 300 of 3000 steps reported after half an hour of training, at a run rate of 0.9 (saves take the rest)
    done = StepsDone(steps=300, training_hours=0.5)
    # When the work is estimated
    estimate = from_progress(3000, done, run_rate=0.9)
    # Then a step is 0.5 * 0.9 / 300 h of work: 4.5 h in all, 0.45 h done, and the source says from what
    assert estimate is not None
    assert estimate.work_hours == pytest.approx(4.5)
    assert estimate.work_done_hours == pytest.approx(0.45)
    assert estimate.work_left_hours == pytest.approx(4.05)
    assert estimate.source == "progress: 300 steps in 0.50 h"


@pytest.mark.parametrize(
    "done",
    [
        pytest.param(None, id="no report"),
        pytest.param(StepsDone(steps=0, training_hours=1.0), id="no step"),
        pytest.param(
            StepsDone(steps=50, training_hours=ESTIMATE_AFTER_HOURS * 0.99), id="too little training"
        ),
    ],
)
def test_no_estimate_before_enough_progress(done: StepsDone | None) -> None:
    # Given too little progress, When estimated, Then there is no estimate (the policy decides without one)
    assert from_progress(1000, done, run_rate=1.0) is None


def test_enough_progress_is_the_threshold_given() -> None:
    # Given the emulator's scaled threshold, When just past it, Then there is an estimate
    done = StepsDone(steps=5, training_hours=0.02)
    assert from_progress(100, done, run_rate=1.0, estimate_after_hours=0.01) is not None


def test_steps_past_the_total_do_not_make_negative_work_left() -> None:
    # Given a script that reports more steps than the manifest said, When estimated, Then nothing is left
    estimate = from_progress(100, StepsDone(steps=120, training_hours=1.0), run_rate=1.0)
    assert estimate is not None
    assert estimate.work_left_hours == 0.0
    assert estimate.work_done_hours == estimate.work_hours


def test_the_manifest_hours_say_so() -> None:
    # Given expected_hours, When taken as the work, Then its source is the manifest
    estimate = from_manifest(24.0, 3.0)
    assert (estimate.work_hours, estimate.work_left_hours, estimate.source) == (24.0, 21.0, "manifest")


def manifest(capacity: dict[str, Any] | None, **training: Any) -> dict[str, Any]:
    document: dict[str, Any] = {"name": "tiny", "training": {"command": ["python", "t.py"], **training}}
    if capacity is not None:
        document["capacity"] = capacity
    return document


def test_a_deadline_takes_total_steps_instead_of_hours() -> None:
    # Given a deadline with the work in steps, When judged, Then the model and the schema accept it
    document = manifest({"deadline": "36h"}, total_steps=100_000)
    assert model_accepts(document)
    assert schema_accepts(document)
    assert JobManifest.model_validate(document).training.total_steps == 100_000


@pytest.mark.parametrize(
    ("document", "message"),
    [
        pytest.param(
            manifest({"deadline": "36h"}, expected_hours=2, total_steps=100),
            "exclude each other",
            id="both hours and steps",
        ),
        pytest.param(manifest(None, total_steps=100), "only used with capacity.deadline", id="steps alone"),
        pytest.param(manifest({"deadline": "36h"}), "training.total_steps", id="neither"),
        pytest.param(manifest({"deadline": "36h"}, total_steps=0), "greater than or equal", id="no steps"),
    ],
)
def test_the_work_is_given_once_and_only_with_a_deadline(document: dict[str, Any], message: str) -> None:
    # Given a manifest breaking the rule, When judged, Then the model (naming the rule) and the schema refuse it
    with pytest.raises(ValueError, match=message):
        JobManifest.model_validate(document)
    assert not schema_accepts(document)

"""capacity.deadline and training.expected_hours: the forms accepted, the combinations refused, in the model and
in the published schema alike."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from spotrun.model.manifest.deadline import deadline_at, deadline_hours, is_absolute
from spotrun.model.manifest.schema import JobManifest
from tests.unit.test_manifest_schema import model_accepts, schema_accepts

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def manifest(capacity: dict[str, Any] | None = None, expected_hours: Any = 2, **extra: Any) -> dict[str, Any]:
    training: dict[str, Any] = {"command": ["python", "t.py"]}
    if expected_hours is not None:
        training["expected_hours"] = expected_hours
    document: dict[str, Any] = {"name": "tiny", "training": training, **extra}
    if capacity is not None:
        document["capacity"] = capacity
    return document


@pytest.mark.parametrize(
    ("written", "hours"),
    [("36h", 36.0), ("90m", 1.5), ("1.5d", 36.0), ("0.5h", 0.5), (".5h", 0.5)],
)
def test_a_duration_is_hours_after_submission(written: str, hours: float) -> None:
    # Given a manifest whose deadline is a duration
    document = manifest({"deadline": written})
    # When it is validated and the deadline read for a job submitted at T0
    parsed = JobManifest.model_validate(document)
    # Then it is kept as written, in the schema too, and stands for that many hours after submission
    assert parsed.capacity.deadline == written
    assert schema_accepts(document)
    assert not is_absolute(written)
    assert deadline_hours(written, T0) == pytest.approx(hours)


@pytest.mark.parametrize(
    "written", ["2026-12-02T18:00:00Z", "2026-12-02T19:00+01:00", "2026-12-02T18:00:00.5Z"]
)
def test_an_instant_with_its_zone_is_that_instant(written: str) -> None:
    # Given an absolute deadline with its zone
    document = manifest({"deadline": written})
    # When it is validated and read
    JobManifest.model_validate(document)
    # Then the model and the schema accept it, and it is 30 h after T0 whatever the zone
    assert schema_accepts(document)
    assert is_absolute(written)
    assert deadline_at(written, T0).astimezone(UTC).replace(microsecond=0) == datetime(
        2026, 12, 2, 18, 0, tzinfo=UTC
    )


REFUSED = [
    pytest.param({"deadline": "36"}, 2, id="a number without unit"),
    pytest.param({"deadline": "36 h"}, 2, id="a space"),
    pytest.param({"deadline": "0h"}, 2, id="zero"),
    pytest.param({"deadline": "3w"}, 2, id="an unknown unit"),
    pytest.param({"deadline": "2026-12-02T18:00:00"}, 2, id="an instant without zone"),
    pytest.param({"deadline": "2026-12-02"}, 2, id="a date"),
    pytest.param({"deadline": 36}, 2, id="a bare number"),
    pytest.param({"deadline": "36h"}, None, id="a deadline without expected_hours"),
    pytest.param(None, 2, id="expected_hours without a deadline"),
    pytest.param({"deadline": "36h"}, 0, id="no work"),
    pytest.param({"deadline": "36h"}, "2", id="hours as text"),
    pytest.param({"deadline": "36h", "spot": False}, 2, id="with spot false"),
    pytest.param({"deadline": "36h", "on_demand_fallback": True}, 2, id="with on_demand_fallback"),
    pytest.param(
        {"deadline": "36h", "fallback_after_interruptions": 1}, 2, id="with fallback_after_interruptions"
    ),
]


@pytest.mark.parametrize(("capacity", "hours"), REFUSED)
def test_the_model_and_the_schema_refuse_each_contradiction(capacity: Any, hours: Any) -> None:
    # Given a manifest breaking one deadline rule
    document = manifest(capacity, hours)
    # When the model and the published schema judge it
    # Then both refuse it
    assert not model_accepts(document)
    assert not schema_accepts(document)


def test_an_impossible_date_passes_the_pattern_but_not_the_model() -> None:
    # Given an instant the pattern cannot tell from a real one
    document = manifest({"deadline": "2026-13-40T18:00:00Z"})
    # When judged, Then only the model refuses it (the 422 the schema-driven tests tolerate), naming the problem
    assert schema_accepts(document)
    assert not model_accepts(document)
    with pytest.raises(ValueError, match="not a real time"):
        JobManifest.model_validate(document)


def test_a_schedule_takes_a_duration_but_not_an_instant() -> None:
    # Given two scheduled manifests, one with a duration, one with an instant
    schedule = {"expression": "rate(1 day)"}
    duration = manifest({"deadline": "20h"}, schedule=schedule)
    instant = manifest({"deadline": "2026-12-02T18:00:00Z"}, schedule=schedule)
    # When judged, Then each run's own duration is fine; one instant for every run is refused, with the fix
    assert model_accepts(duration)
    assert schema_accepts(duration)
    assert not model_accepts(instant)
    assert not schema_accepts(instant)
    with pytest.raises(ValueError, match="use a duration after submission"):
        JobManifest.model_validate(instant)


def test_the_messages_name_the_rule() -> None:
    # Given the contradictions, When validated, Then each message says what to give instead
    cases = {
        "needs the work to fit before it": manifest({"deadline": "36h"}, None),
        "only used with capacity.deadline": manifest(None, 2),
        "deadline needs spot: true": manifest({"deadline": "36h", "spot": False}),
        "deadline and on_demand_fallback exclude": manifest({"deadline": "36h", "on_demand_fallback": True}),
    }
    for message, document in cases.items():
        with pytest.raises(ValueError, match=message):
            JobManifest.model_validate(copy.deepcopy(document))


def test_without_a_deadline_the_fallback_rules_are_as_before() -> None:
    # Given today's manifest with its fallback settings, When validated, Then accepted as before
    document = manifest({"on_demand_fallback": True, "fallback_after_interruptions": 1}, None)
    assert model_accepts(document)
    assert schema_accepts(document)


def test_a_stored_manifest_reads_back() -> None:
    # Given a deadline manifest as the job record stores it (every default written out)
    stored = JobManifest.model_validate(manifest({"deadline": "36h"})).model_dump(mode="json")
    # When it is read back, Then it is accepted (the default fallback_after_interruptions is no contradiction)
    assert JobManifest.model_validate(stored).capacity.deadline == "36h"
    assert schema_accepts(stored)


@pytest.mark.parametrize("written", ["1000000d", "99999999999999999999d", "1234567.5h"])
def test_a_duration_past_six_digits_is_refused_by_the_model_and_the_schema(written: str) -> None:
    # Given a deadline so far away that adding it to the submission time would overflow datetime (a 500)
    document = manifest({"deadline": written})
    # When judged, Then both refuse it, as they accept six digits
    assert not schema_accepts(document)
    assert not model_accepts(document)
    assert model_accepts(manifest({"deadline": "999999d"}))
    assert deadline_hours("999999d", T0) == 999999 * 24

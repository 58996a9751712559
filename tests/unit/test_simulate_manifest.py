"""spotrun simulate's job from a manifest: its deadline and hours read, its work in steps refused clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotrun.cli.simulate import _from_manifest

BASE = "name: tiny\ncapacity:\n  deadline: 36h\ntraining:\n  command: [python, t.py]\n"


def test_the_deadline_and_the_hours_are_read(tmp_path: Path) -> None:
    # Given a manifest with a 36 h deadline and 24 h of work
    path = tmp_path / "m.yaml"
    path.write_text(BASE + "  expected_hours: 24\n")
    # When simulate reads it, Then both are hours
    work, deadline, _, in_steps = _from_manifest(path)
    assert work == 24
    assert not in_steps
    assert deadline == pytest.approx(36.0)


def test_work_in_steps_asks_for_the_hours_and_says_why(tmp_path: Path) -> None:
    # Given a manifest whose work is in steps
    path = tmp_path / "m.yaml"
    path.write_text(BASE + "  total_steps: 1000\n")
    # When simulate reads it, Then it has no hours, and the message says why and what to give
    work, _, missing, in_steps = _from_manifest(path)
    assert work is None
    assert in_steps  # given --work-hours, spotrun's policy is replayed without an estimate at first
    assert "training.total_steps" in missing
    assert "--work-hours" in missing

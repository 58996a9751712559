"""The manifest's deadline: its written forms (``capacity.deadline``), read once, at the edge.

Pure. Two forms, both stated as a JSON Schema pattern and checked with the same text:

- a duration after submission: a positive number and a unit, ``m``, ``h`` or ``d`` (``90m``, ``36h``, ``1.5d``);
  a scheduled job's runs each get the duration from their own submission;
- an absolute time, ISO-8601 with its zone (``2026-12-03T18:00:00Z``, ``2026-12-03T18:00+01:00``); refused on
  a schedule, whose runs would all share one instant.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Final

# At most six digits before the point (999999d): a bigger number of days overflows datetime, and no deadline needs it.
_DURATION_PATTERN: Final = r"(?:[1-9][0-9]{0,5}|0?\.[0-9]*[1-9][0-9]*|[1-9][0-9]{0,5}\.[0-9]+)[mhd]"
_INSTANT_PATTERN: Final = (
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?(?:Z|[+\-][0-9]{2}:[0-9]{2})"
)
DEADLINE_PATTERN: Final = rf"^(?:{_DURATION_PATTERN}|{_INSTANT_PATTERN})$"
_DURATION: Final = r"^(?P<value>[0-9.]+)(?P<unit>[mhd])$"
_UNIT_HOURS: Final = {"m": 1 / 60, "h": 1.0, "d": 24.0}

DEADLINE_DESCRIPTION: Final = (
    "When the job must be finished: a duration after submission (a number and m, h or d: '36h', '90m', '1.5d') "
    "or an absolute time, ISO-8601 with its zone ('2026-12-03T18:00:00Z'; not on a schedule). spotrun then "
    "chooses spot or on-demand at every acquisition and while the job runs, from the slack left (see "
    "docs/guides/deadlines.md), and refuses at submission a deadline that even on-demand could not meet. Needs "
    "training.expected_hours; not with spot: false, on_demand_fallback or a fallback_after_interruptions "
    "other than its default, which the deadline replaces."
)


def check_deadline(value: str) -> str:
    """The pydantic validator of ``capacity.deadline``: the text as written, when one of the two forms."""
    if not re.fullmatch(DEADLINE_PATTERN, value):
        raise ValueError(
            f"{value!r} is neither a duration like '36h', '90m' or '1.5d' nor an ISO-8601 time with its zone "
            "like '2026-12-03T18:00:00Z'"
        )
    if not re.fullmatch(_DURATION, value):
        try:
            datetime.fromisoformat(value)
        except ValueError as exc:  # the pattern lets 2026-13-40 through; the calendar does not
            raise ValueError(f"{value!r} is not a real time: {exc}") from None
    return value


def is_absolute(deadline: str) -> bool:
    """Whether the deadline is an instant (not a duration after submission)."""
    return re.fullmatch(_DURATION, deadline) is None


def deadline_at(deadline: str, submitted_at: datetime) -> datetime:
    """The instant a (checked) deadline stands for, for a job submitted at ``submitted_at``."""
    duration = re.fullmatch(_DURATION, deadline)
    if duration is None:
        return datetime.fromisoformat(deadline)
    return submitted_at + timedelta(hours=float(duration["value"]) * _UNIT_HOURS[duration["unit"]])


def deadline_hours(deadline: str, submitted_at: datetime) -> float:
    """The deadline as hours after submission (negative: already past)."""
    return (deadline_at(deadline, submitted_at) - submitted_at).total_seconds() / 3600

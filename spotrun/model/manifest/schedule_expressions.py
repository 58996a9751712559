"""EventBridge Scheduler expressions: validation as Scheduler does it, and the next fire time.

``rate(N unit)``: N a positive integer, unit minute(s), hour(s) or day(s), singular exactly when N is 1.
``cron(minutes hours day-of-month month day-of-week year)``: six fields; exactly one of day-of-month and
day-of-week is ``?``; values in range (minutes 0-59, hours 0-23, day-of-month 1-31, month 1-12 or JAN-DEC,
day-of-week 1-7 or SUN-SAT with 1 = Sunday, year 1970-2199); ``*``, lists, ranges and ``/`` steps everywhere;
``L``, ``W`` (day-of-month) and ``L``, ``#`` (day-of-week) are accepted. :func:`next_fire` computes every form
except ``L``, ``W`` and ``#``, which it refuses (the emulator does not fire such schedules).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_RATE: Final = r"^rate\((?P<value>\S+) (?P<unit>\S+)\)$"
_UNITS = {"minute": 60, "hour": 3600, "day": 86400}
_MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
_DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
# name, low, high, names (index 0 -> low)
_FIELDS: tuple[tuple[str, int, int, list[str]], ...] = (
    ("minutes", 0, 59, []),
    ("hours", 0, 23, []),
    ("day-of-month", 1, 31, []),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 1, 7, _DAYS),
    ("year", 1970, 2199, []),
)
_SEARCH_DAYS = 366 * 5


class InvalidExpression(ValueError):
    """A schedule expression EventBridge Scheduler would refuse; the message names the problem."""


@dataclass(frozen=True)
class Rate:
    """``rate(N unit)``."""

    seconds: int


@dataclass(frozen=True)
class Cron:
    """``cron(...)``: the allowed values of each field (None: ``?`` or a form only AWS computes)."""

    fields: tuple[frozenset[int] | None, ...]
    special: bool  # uses L, W or #


def parse(expression: str) -> Rate | Cron:
    """Parse and validate a Scheduler expression.

    Raises
    ------
    InvalidExpression
        With a message naming the expression and what is wrong with it.
    """
    if expression.startswith("rate("):
        return _rate(expression)
    if expression.startswith("cron(") and expression.endswith(")"):
        return _cron(expression)
    raise InvalidExpression(f"{expression!r}: a schedule expression is cron(...) or rate(...)")


def _rate(expression: str) -> Rate:
    match = re.match(_RATE, expression)
    if not match:
        raise InvalidExpression(f"{expression!r}: a rate is rate(N unit), e.g. rate(5 minutes)")
    value, unit = match["value"], match["unit"]
    if not value.isdigit() or int(value) < 1:
        raise InvalidExpression(f"{expression!r}: the rate's value must be a positive integer, got {value!r}")
    number = int(value)
    singular = unit.removesuffix("s")
    if singular not in _UNITS:
        raise InvalidExpression(
            f"{expression!r}: the unit must be minute(s), hour(s) or day(s), got {unit!r}"
        )
    if (number == 1) != (unit == singular):
        raise InvalidExpression(
            f"{expression!r}: use a singular unit for 1 and a plural one otherwise, e.g. rate(1 {singular}) "
            f"or rate(2 {singular}s)"
        )
    seconds = number * _UNITS[singular]
    if seconds > _SEARCH_DAYS * _UNITS["day"]:
        # The same bound as a cron's: a first run further away than five years is no schedule (and one of
        # thousands of years overflowed datetime when its next run was computed: a 500 schemathesis found).
        raise InvalidExpression(f"{expression!r} does not fire within five years")
    return Rate(seconds)


def _cron(expression: str) -> Cron:
    parts = expression[len("cron(") : -1].split()
    if len(parts) != len(_FIELDS):
        raise InvalidExpression(
            f"{expression!r}: cron needs 6 fields (minutes hours day-of-month month day-of-week year), "
            f"got {len(parts)}"
        )
    dom, dow = parts[2], parts[4]
    if (dom == "?") == (dow == "?"):
        raise InvalidExpression(f"{expression!r}: exactly one of day-of-month and day-of-week must be '?'")
    values: list[frozenset[int] | None] = []
    special = False
    for text, (name, low, high, names) in zip(parts, _FIELDS, strict=True):
        if text == "?":
            if name not in ("day-of-month", "day-of-week"):
                raise InvalidExpression(f"{expression!r}: '?' is only allowed in day-of-month or day-of-week")
            values.append(None)
        elif _special(text, name):
            special = True
            values.append(None)
        else:
            values.append(_field(expression, text, name, low, high, names))
    return Cron(tuple(values), special)


def _special(text: str, name: str) -> bool:
    if name == "day-of-month":
        return re.fullmatch(r"L|LW|([1-9]|[12]\d|3[01])W", text) is not None
    if name == "day-of-week":
        return re.fullmatch(r"([1-7]|[A-Z]{3})L|L|([1-7]|[A-Z]{3})#[1-5]", text) is not None
    return False


def _field(expression: str, text: str, name: str, low: int, high: int, names: list[str]) -> frozenset[int]:
    allowed: set[int] = set()
    for item in text.split(","):
        base, _, step_text = item.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) < 1:
                raise InvalidExpression(f"{expression!r}: {name}: bad step {step_text!r}")
            step = int(step_text)
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = (
                _value(expression, first, name, low, high, names),
                _value(expression, last, name, low, high, names),
            )
            if start > end:
                raise InvalidExpression(f"{expression!r}: {name}: range {base!r} runs backwards")
        else:
            start = _value(expression, base, name, low, high, names)
            end = high if step_text else start
        allowed.update(range(start, end + 1, step))
    return frozenset(allowed)


def _value(expression: str, text: str, name: str, low: int, high: int, names: list[str]) -> int:
    if text.upper() in names:
        return low + names.index(text.upper())
    if not text.isdigit() or not low <= int(text) <= high:
        raise InvalidExpression(f"{expression!r}: {name} must be {low}-{high}, got {text!r}")
    return int(text)


def validate(expression: str, timezone: str = "UTC") -> None:
    """Raise :class:`InvalidExpression` when Scheduler would refuse the expression or the time zone."""
    parse(expression)
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidExpression(f"{timezone!r} is not an IANA time zone") from exc


def next_fire(
    expression: str, after: datetime, timezone: str = "UTC", start: datetime | None = None
) -> datetime:
    """The first time strictly after ``after`` at which the schedule fires (aware datetime, UTC).

    A rate counts from ``start`` (the schedule's creation; ``after`` when omitted). A cron is evaluated in
    ``timezone``, to the minute.

    Raises
    ------
    InvalidExpression
        When the expression is invalid, uses L, W or #, or never fires within five years.
    """
    parsed = parse(expression)
    zone = ZoneInfo("UTC")
    if isinstance(parsed, Rate):
        origin = start or after
        periods = max(0, int((after - origin).total_seconds() // parsed.seconds)) + 1
        return (origin + timedelta(seconds=parsed.seconds * periods)).astimezone(zone)
    if parsed.special:
        raise InvalidExpression(f"{expression!r}: L, W and # are not computed here")
    minutes, hours, dom, months, dow, years = parsed.fields
    local = after.astimezone(ZoneInfo(timezone)).replace(second=0, microsecond=0) + timedelta(minutes=1)
    day = local.replace(hour=0, minute=0)
    for _ in range(_SEARCH_DAYS):
        weekday = (day.weekday() + 1) % 7 + 1  # Python: Monday 0; Scheduler: Sunday 1
        if (
            (years is None or day.year in years)
            and (months is None or day.month in months)
            and (dom is None or day.day in dom)
            and (dow is None or weekday in dow)
        ):
            for hour in sorted(hours or ()):
                for minute in sorted(minutes or ()):
                    candidate = day.replace(hour=hour, minute=minute)
                    if candidate >= local:
                        return candidate.astimezone(zone)
        day = (day + timedelta(days=1)).replace(hour=0, minute=0)
    raise InvalidExpression(f"{expression!r} does not fire within five years")

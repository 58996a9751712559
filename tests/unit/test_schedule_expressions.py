from datetime import UTC, datetime

import pytest

from spotrun.model.manifest.schedule_expressions import InvalidExpression, Rate, next_fire, parse, validate

T0 = datetime(2026, 11, 30, 10, 15, 30, tzinfo=UTC)  # a Monday


@pytest.mark.parametrize(
    ("expression", "seconds"),
    [
        ("rate(1 minute)", 60),
        ("rate(5 minutes)", 300),
        ("rate(1 hour)", 3600),
        ("rate(2 days)", 172800),
        ("rate(1830 days)", 1830 * 86400),
    ],
)
def test_valid_rates_parse_to_their_period(expression, seconds):
    # Given a rate Scheduler accepts
    # When it is parsed
    parsed = parse(expression)
    # Then its period is known
    assert parsed == Rate(seconds)


@pytest.mark.parametrize(
    ("expression", "named"),
    [
        ("rate(0 minutes)", "positive integer"),
        ("rate(-1 minutes)", "positive integer"),
        ("rate(1.5 hours)", "positive integer"),
        ("rate(1 minutes)", "singular unit"),
        ("rate(5 minute)", "singular unit"),
        ("rate(3 weeks)", "minute(s), hour(s) or day(s)"),
        ("rate(5)", "rate(N unit)"),
        ("rate(1831 days)", "does not fire within five years"),
        ("rate(17216479047 minutes)", "does not fire within five years"),
        ("cron(0 3 * * ? )", "6 fields"),
        ("cron(0 3 * * *)", "6 fields"),
        ("cron(0 3 * * * *)", "exactly one of day-of-month and day-of-week"),
        ("cron(0 3 ? * ? *)", "exactly one of day-of-month and day-of-week"),
        ("cron(60 3 * * ? *)", "minutes must be 0-59"),
        ("cron(0 24 * * ? *)", "hours must be 0-23"),
        ("cron(0 3 32 * ? *)", "day-of-month must be 1-31"),
        ("cron(0 3 ? 13 MON *)", "month must be 1-12"),
        ("cron(0 3 ? * 8 *)", "day-of-week must be 1-7"),
        ("cron(0 3 ? * FOO *)", "day-of-week must be 1-7"),
        ("cron(0 3 * * ? 2300)", "year must be 1970-2199"),
        ("cron(0 5-3 * * ? *)", "runs backwards"),
        ("cron(0/0 3 * * ? *)", "bad step"),
        ("cron(? 3 * * ? *)", "'?' is only allowed"),
        ("at(2026-01-01T00:00:00)", "cron(...) or rate(...)"),
    ],
)
def test_invalid_expressions_are_refused_with_a_message_naming_the_problem(expression, named):
    # Given an expression Scheduler would refuse
    # When it is validated
    with pytest.raises(InvalidExpression) as refused:
        validate(expression)
    # Then the message names the expression and what is wrong
    assert expression in str(refused.value)
    assert named in str(refused.value)


def test_an_unknown_time_zone_is_refused():
    # Given a valid expression in a time zone that does not exist
    # When it is validated
    # Then the zone is named
    with pytest.raises(InvalidExpression, match="Mars/Olympus"):
        validate("cron(0 3 * * ? *)", "Mars/Olympus")


@pytest.mark.parametrize(
    "expression",
    ["cron(0 3 L * ? *)", "cron(0 3 15W * ? *)", "cron(0 3 ? * 6L *)", "cron(0 3 ? * MON#2 *)"],
)
def test_last_weekday_and_nth_forms_are_valid_but_not_computed(expression):
    # Given an expression with L, W or #
    # When it is validated, Then it is accepted
    validate(expression)
    # But its next time is not computed here
    with pytest.raises(InvalidExpression, match="not computed"):
        next_fire(expression, T0)


@pytest.mark.parametrize(
    ("expression", "timezone", "expected"),
    [
        ("cron(0 3 * * ? *)", "UTC", datetime(2026, 12, 1, 3, 0, tzinfo=UTC)),
        ("cron(30 10 * * ? *)", "UTC", datetime(2026, 11, 30, 10, 30, tzinfo=UTC)),
        ("cron(0/20 * * * ? *)", "UTC", datetime(2026, 11, 30, 10, 20, tzinfo=UTC)),
        ("cron(0 9 ? * SAT,SUN *)", "UTC", datetime(2026, 12, 5, 9, 0, tzinfo=UTC)),
        ("cron(0 9 ? * 1 *)", "UTC", datetime(2026, 12, 6, 9, 0, tzinfo=UTC)),  # 1 = Sunday
        ("cron(0 0 1 JAN ? 2027)", "UTC", datetime(2027, 1, 1, 0, 0, tzinfo=UTC)),
        ("cron(0 3 * * ? *)", "Europe/Paris", datetime(2026, 12, 1, 2, 0, tzinfo=UTC)),
    ],
)
def test_next_cron_time(expression, timezone, expected):
    # Given a cron expression and a time
    # When the next firing is computed
    # Then it is the first matching minute after it, in the schedule's zone
    assert next_fire(expression, T0, timezone) == expected


def test_a_rate_fires_every_period_after_its_start():
    # Given a rate created at T0
    # When the next firing is asked for just after the second one
    after = datetime(2026, 11, 30, 10, 25, 31, tzinfo=UTC)
    # Then it is the third period after the start
    assert next_fire("rate(5 minutes)", after, start=T0) == datetime(2026, 11, 30, 10, 30, 30, tzinfo=UTC)

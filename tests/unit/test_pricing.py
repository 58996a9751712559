"""Unit tests of spotrun.model.capacity.pricing: billing, per-job cost accounting and regional on-demand prices."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from spotrun.model.capacity.on_demand_prices import ON_DEMAND_USD_PER_HOUR, REGIONS
from spotrun.model.capacity.pricing import (
    BILLING_MINIMUM_SECONDS,
    GPU_CATALOG,
    CostReport,
    attempt_price,
    billable_seconds,
    job_cost,
    on_demand_price,
    region_of_zone,
    usd_for,
)

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
_IDS = (f"i-{n:017x}" for n in itertools.count(1))


@dataclass(frozen=True)
class FrozenAttempt:
    instance_type: str
    price_per_hour: float | None
    started_at: datetime
    ended_at: datetime | None
    availability_zone: str = "us-east-1a"
    lifecycle: str = "spot"
    instance_id: str = field(default_factory=lambda: next(_IDS))


class ModelAttempt(BaseModel):
    """A pydantic stand-in for spotrun.model.job.attempt.Attempt, which carries more fields than the cost needs."""

    model_config = ConfigDict(frozen=True)

    instance_type: str
    price_per_hour: float | None
    started_at: datetime
    ended_at: datetime | None
    lifecycle: str = "spot"
    availability_zone: str = "us-east-1a"
    instance_id: str = "i-model"


# ----------------------------------------------------------------------------------------------------
# Billing of one instance
# ----------------------------------------------------------------------------------------------------


def test_one_hour_costs_the_hourly_price() -> None:
    # Given an instance at 1.2 USD/h for exactly one hour
    # When it is priced
    cost = usd_for(1.2, T0, T0 + timedelta(hours=1))
    # Then it costs 1.2 USD
    assert cost == pytest.approx(1.2)


def test_billing_has_a_sixty_second_minimum() -> None:
    # Given an instance that ran 10 seconds, and one that ran no time at all
    # When they are priced at 3.6 USD/h (0.001 USD per second)
    short = usd_for(3.6, T0, T0 + timedelta(seconds=10))
    instant = usd_for(3.6, T0, T0)
    # Then each is billed 60 seconds
    assert BILLING_MINIMUM_SECONDS == 60
    assert short == pytest.approx(0.06)
    assert instant == pytest.approx(0.06)


def test_billing_is_per_second_and_rounds_a_started_second_up() -> None:
    # Given an instance that ran 90.2 seconds
    # When its billable time is computed
    seconds = billable_seconds(T0, T0 + timedelta(seconds=90.2))
    # Then 91 seconds are billed, not 90 and not a whole minute block
    assert seconds == 91
    assert usd_for(3.6, T0, T0 + timedelta(seconds=90.2)) == pytest.approx(0.091)


def test_times_in_different_zones_are_compared_as_instants() -> None:
    # Given a start in UTC and an end written in UTC+2, one hour later in absolute time
    end = (T0 + timedelta(hours=1)).astimezone(timezone(timedelta(hours=2)))
    # When priced
    cost = usd_for(2.0, T0, end)
    # Then the offset does not change the duration
    assert cost == pytest.approx(2.0)


def test_naive_datetimes_are_refused() -> None:
    # Given a naive start time
    naive = datetime(2025, 3, 1, 12, 0, 0)  # naive on purpose
    # When priced
    # Then the caller is told to pass aware times, because a naive one would be read in local time
    with pytest.raises(ValueError, match="timezone-aware"):
        usd_for(1.0, naive, T0)


def test_an_end_before_the_start_is_refused() -> None:
    # Given an end one second before the start
    # When priced
    # Then it is an error rather than a negative or minimum charge
    with pytest.raises(ValueError, match="before started_at"):
        usd_for(1.0, T0, T0 - timedelta(seconds=1))


def test_a_negative_price_is_refused() -> None:
    # Given a negative price
    # When priced
    # Then it is an error
    with pytest.raises(ValueError, match="negative"):
        usd_for(-0.1, T0, T0 + timedelta(hours=1))


# ----------------------------------------------------------------------------------------------------
# Cost of a job
# ----------------------------------------------------------------------------------------------------


def test_an_instance_kept_across_attempts_counts_once() -> None:
    # Given one node kept from one attempt into the next (two records of one instance), beside another instance
    kept = [
        FrozenAttempt("g5.xlarge", 0.30, T0, T0 + timedelta(hours=1), instance_id="i-kept"),
        FrozenAttempt(
            "g5.xlarge", 0.30, T0 + timedelta(hours=1), T0 + timedelta(hours=2), instance_id="i-kept"
        ),
    ]
    other = FrozenAttempt("g5.xlarge", 0.30, T0, T0 + timedelta(hours=1))
    # When the job is costed
    report = job_cost([*kept, other])
    # Then its three hours are billed, on two instances
    assert report.spot_usd == 0.9
    assert report.spot_instances == 2


def test_job_cost_of_one_spot_attempt() -> None:
    # Given two hours on g5.xlarge spot at 0.30 USD/h in us-east-1 (on demand there: 1.006 USD/h)
    attempts = [FrozenAttempt("g5.xlarge", 0.30, T0, T0 + timedelta(hours=2))]
    # When the job is costed
    report = job_cost(attempts)
    # Then it cost 0.60 at spot prices, would have cost 2.012 on demand, a 70.2 % saving
    assert report == CostReport(
        usd=0.6, spot_usd=0.6, spot_instances=1, spot_at_on_demand_usd=2.012, savings_pct=70.2
    )


def test_job_cost_sums_attempts_each_with_its_own_minimum() -> None:
    # Given an attempt of 10 s (billed 60 s) and one of one hour, both on p3.2xlarge spot at 0.918 USD/h
    attempts = [
        FrozenAttempt("p3.2xlarge", 0.918, T0, T0 + timedelta(seconds=10)),
        FrozenAttempt("p3.2xlarge", 0.918, T0 + timedelta(minutes=5), T0 + timedelta(hours=1, minutes=5)),
    ]
    # When the job is costed
    report = job_cost(attempts)
    # Then 3660 instance-seconds are billed on both sides
    assert report.usd == round(0.918 * 3660 / 3600, 4)
    assert report.spot_at_on_demand_usd == round(3.06 * 3660 / 3600, 4)
    assert report.savings_pct == 70.0


def test_job_cost_of_a_running_attempt_goes_up_to_now() -> None:
    # Given an attempt still running (no end) that started 30 minutes ago
    attempts = [FrozenAttempt("g4dn.xlarge", 0.2, T0, None)]
    # When the job is costed now
    report = job_cost(attempts, now=T0 + timedelta(minutes=30))
    # Then half an hour is billed
    assert report.usd == 0.1
    assert report.spot_at_on_demand_usd == 0.263


def test_job_cost_of_a_running_attempt_needs_now() -> None:
    # Given an attempt still running
    attempts = [FrozenAttempt("g4dn.xlarge", 0.2, T0, None)]
    # When the job is costed without saying when "now" is
    # Then the error says what is missing
    with pytest.raises(ValueError, match="now="):
        job_cost(attempts)


def test_an_on_demand_run_is_costed_on_demand_and_claims_no_saving() -> None:
    # Given an on-demand attempt, paid at the on-demand price
    attempts = [FrozenAttempt("g6.xlarge", 0.8048, T0, T0 + timedelta(hours=3), lifecycle="on-demand")]
    # When the job is costed
    report = job_cost(attempts)
    # Then the cost is on-demand money, and no saving is claimed: nothing was compared
    assert report == CostReport(usd=2.4144, on_demand_usd=2.4144, on_demand_instances=1)
    assert report.savings_pct is None
    assert report.spot_at_on_demand_usd is None


def test_job_cost_never_reports_minus_zero() -> None:
    # Given a spot price a hair above on-demand (a -0.04 % saving, which rounds to -0.0)
    attempts = [FrozenAttempt("g5.xlarge", 1.0064, T0, T0 + timedelta(hours=1))]
    # When the job is costed
    report = job_cost(attempts)
    # Then the saving prints as 0.0, not -0.0
    assert str(report.savings_pct) == "0.0"


def test_job_cost_of_an_unknown_type_claims_no_saving() -> None:
    # Given a spot attempt on a type without any on-demand figure
    attempts = [FrozenAttempt("g7e.2xlarge", 1.0, T0, T0 + timedelta(hours=1))]
    # When the job is costed
    report = job_cost(attempts)
    # Then it is paid for, and its saving is said to be unknown rather than invented
    assert report == CostReport(usd=1.0, spot_usd=1.0, spot_instances=1, spot_not_compared=1)


def test_spot_in_another_region_is_compared_with_that_regions_on_demand_price() -> None:
    # Given an hour of g5.xlarge spot at 0.5 USD/h in eu-west-1, where on demand costs 1.123 USD/h
    attempts = [FrozenAttempt("g5.xlarge", 0.5, T0, T0 + timedelta(hours=1), availability_zone="eu-west-1b")]
    # When the job is costed
    report = job_cost(attempts)
    # Then the saving is against eu-west-1's price, not us-east-1's 1.006
    assert report.spot_at_on_demand_usd == 1.123
    assert report.savings_pct == round((1 - 0.5 / 1.123) * 100, 1)


def test_spot_in_a_region_without_figures_has_an_unknown_saving() -> None:
    # Given an hour of g5.xlarge spot in sa-east-1, a region the on-demand table does not cover
    attempts = [FrozenAttempt("g5.xlarge", 0.5, T0, T0 + timedelta(hours=1), availability_zone="sa-east-1a")]
    # When the job is costed
    report = job_cost(attempts)
    # Then no us-east-1 figure is borrowed: the comparison is unknown
    assert report.spot_at_on_demand_usd is None
    assert report.savings_pct is None
    assert report.spot_not_compared == 1
    assert report.usd == 0.5


def test_an_instance_at_an_unknown_price_is_counted_as_unpriced() -> None:
    # Given an on-demand hour in a region without figures (price unknown), and a spot hour at 0.3
    attempts = [
        FrozenAttempt("g5.xlarge", None, T0, T0 + timedelta(hours=1), "sa-east-1a", "on-demand"),
        FrozenAttempt("g5.xlarge", 0.3, T0, T0 + timedelta(hours=1)),
    ]
    # When the job is costed
    report = job_cost(attempts)
    # Then the known cost is reported and the unpriced instance is named, not priced at zero silently
    assert (report.usd, report.unpriced_instances, report.on_demand_instances) == (0.3, 1, 0)


def test_a_mixed_job_is_split_and_saves_only_on_its_spot_part() -> None:
    # Given a spot hour at 0.5 on g5.xlarge, then an on-demand hour at 1.006 after fallback
    attempts = [
        ModelAttempt(
            instance_type="g5.xlarge", price_per_hour=0.5, started_at=T0, ended_at=T0 + timedelta(hours=1)
        ),
        ModelAttempt(
            instance_type="g5.xlarge",
            price_per_hour=1.006,
            started_at=T0 + timedelta(hours=1),
            ended_at=T0 + timedelta(hours=2),
            lifecycle="on-demand",
        ),
    ]
    # When the job is costed
    report = job_cost(attempts)
    # Then spot and on-demand money are apart, and the saving is the spot hour's: 1 - 0.5 / 1.006
    assert report == CostReport(
        usd=1.506,
        spot_usd=0.5,
        on_demand_usd=1.006,
        spot_instances=1,
        on_demand_instances=1,
        spot_at_on_demand_usd=1.006,
        savings_pct=50.3,
    )


def test_job_cost_rounds_money_to_four_decimals() -> None:
    # Given 61 seconds at 1 USD/h (0.016944... USD)
    attempts = [FrozenAttempt("g5.xlarge", 1.0, T0, T0 + timedelta(seconds=61))]
    # When the job is costed
    report = job_cost(attempts)
    # Then amounts carry four decimals and the percentage one
    assert report.usd == 0.0169
    assert report.spot_at_on_demand_usd == round(1.006 * 61 / 3600, 4)
    assert report.savings_pct == round((1 - 1.0 / 1.006) * 100, 1)


def test_job_cost_of_no_attempt_is_zero() -> None:
    # Given a job that never got an instance
    # When it is costed
    report = job_cost([])
    # Then everything is zero, nothing divides by zero, and no saving is claimed
    assert report == CostReport(usd=0.0)
    assert report.savings_pct is None


def test_cost_report_is_immutable() -> None:
    # Given a report
    report = CostReport(usd=1.0, spot_usd=1.0)
    # When a field is assigned
    # Then pydantic refuses, so a stored report cannot drift
    with pytest.raises(ValidationError):
        report.usd = 0.5  # type: ignore[misc]


# ----------------------------------------------------------------------------------------------------
# Regions and price sources
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "region"),
    [
        ("us-east-1a", "us-east-1"),
        ("eu-central-1c", "eu-central-1"),
        ("us-west-2-lax-1a", "us-west-2"),
        ("us-gov-west-1b", "us-gov-west-1"),
        ("ap-northeast-1d", "ap-northeast-1"),
    ],
)
def test_the_region_of_a_zone(zone: str, region: str) -> None:
    assert region_of_zone(zone) == region


def test_a_name_that_is_no_zone_is_refused() -> None:
    with pytest.raises(ValueError, match="not an AWS availability zone"):
        region_of_zone("mars-1a")


@pytest.mark.parametrize(
    ("region", "name", "price"),
    [
        ("us-east-1", "g5.xlarge", 1.006),
        ("eu-west-1", "g5.xlarge", 1.123),
        ("eu-central-1", "g4dn.xlarge", 0.658),
        ("ap-northeast-1", "p4d.24xlarge", 30.09784),
    ],
)
def test_on_demand_prices_are_per_region(region: str, name: str, price: float) -> None:
    assert on_demand_price(name, region) == price


def test_no_price_is_borrowed_from_another_region_or_invented() -> None:
    # Given a region the table does not cover, a type not offered in a covered region, and a type with no figure
    # Then there is no on-demand price for any of them
    assert on_demand_price("g5.xlarge", "sa-east-1") is None
    assert on_demand_price("g6.xlarge", "eu-west-1") is None
    assert on_demand_price("p5e.48xlarge", "us-east-1") is None


def test_every_claimed_region_prices_most_of_the_catalog_and_nothing_else() -> None:
    for region in REGIONS:
        prices = ON_DEMAND_USD_PER_HOUR[region]
        assert set(prices) <= set(GPU_CATALOG)
        assert len(prices) >= 15, region
        assert all(0.1 < price < 100 for price in prices.values())


@pytest.mark.parametrize(
    ("lifecycle", "zone", "spot", "expected"),
    [
        ("spot", "eu-west-1a", 0.41, (0.41, "spot-price-history")),
        ("spot", "eu-west-1a", None, (1.123, "estimate")),
        ("on-demand", "eu-west-1a", None, (1.123, "on-demand-table")),
        ("on-demand", "sa-east-1a", None, (None, "unknown")),
        ("spot", "sa-east-1a", None, (None, "unknown")),
    ],
)
def test_each_price_says_where_it_came_from(
    lifecycle: str, zone: str, spot: float | None, expected: tuple[float | None, str]
) -> None:
    price = attempt_price(
        lifecycle=lifecycle, instance_type="g5.xlarge", availability_zone=zone, spot_price=spot
    )
    assert price == expected

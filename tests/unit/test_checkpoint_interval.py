"""The Young/Daly interval behind checkpoint.interval: auto (spotrun.model.checkpoint_interval)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotrun.model.checkpoint_interval import (
    auto_interval,
    daly_interval,
    expected_lost_work_hours,
    uncovered_fraction,
    young_interval,
)


def test_young_is_the_square_root_of_twice_cost_times_mtbf() -> None:
    assert young_interval(0.1, 20.0) == pytest.approx(2.0)


def test_daly_adds_the_higher_order_terms_and_subtracts_the_save() -> None:
    # Given C = 0.1 h and M = 10 h (C / 2M = 0.005)
    # When Daly's interval is computed
    # Then sqrt(2) x (1 + sqrt(0.005) / 3 + 0.005 / 9) - 0.1
    expected = math.sqrt(2) * (1 + math.sqrt(0.005) / 3 + 0.005 / 9) - 0.1
    assert daly_interval(0.1, 10.0) == pytest.approx(expected)


def test_daly_is_the_mtbf_once_a_save_lasts_twice_as_long() -> None:
    assert daly_interval(3.0, 1.5) == 1.5


def test_a_reliable_notice_leaves_only_the_silent_failures() -> None:
    # Given a one-minute save and a two-minute notice, then a five-minute save
    # Then only the silent share loses work, then every interruption does
    assert uncovered_fraction(1 / 60, 2 / 60, 0.05) == 0.05
    assert uncovered_fraction(5 / 60, 2 / 60, 0.05) == 1.0


def test_no_uncovered_failure_gives_the_cap_and_says_so() -> None:
    # Given no uncovered failure ever seen
    choice = auto_interval(0.1, math.inf, max_interval_hours=4.0)
    # Then the interval is the cap, and the why names the inputs
    assert choice.interval_hours == 4.0
    assert choice.capped
    assert "6.0-minute save" in choice.why
    assert "no uncovered failure" in choice.why
    assert "capped" in choice.why


def test_the_cap_applies_to_a_long_estimate_only() -> None:
    # Given a short MTBF (interval below the cap) and a long one (above)
    short = auto_interval(0.1, 10.0, max_interval_hours=4.0)
    long = auto_interval(0.1, 1000.0, max_interval_hours=4.0)
    # Then the first is Daly's, uncapped; the second the cap
    assert short.interval_hours == pytest.approx(daly_interval(0.1, 10.0))
    assert not short.capped
    assert long.interval_hours == 4.0
    assert long.capped
    assert "10.00 h" in short.why


def test_young_can_be_chosen() -> None:
    assert auto_interval(0.1, 20.0, 10.0, formula="young").interval_hours == pytest.approx(2.0)


@pytest.mark.parametrize(("cost", "mtbf", "cap"), [(0.0, 1.0, 1.0), (0.1, 0.0, 1.0), (0.1, 1.0, 0.0)])
def test_nonsense_inputs_are_refused(cost: float, mtbf: float, cap: float) -> None:
    with pytest.raises(ValueError):
        auto_interval(cost, mtbf, cap)


def test_the_expected_loss_is_half_an_interval_per_failure() -> None:
    assert expected_lost_work_hours(0.8, 5) == pytest.approx(2.0)


@settings(max_examples=100, deadline=None)
@given(
    cost=st.floats(0.001, 1.0),
    ratio=st.floats(1.0, 1e4),
    longer=st.floats(1.0, 100.0),
    cap=st.floats(0.1, 24.0),
)
def test_the_interval_is_positive_capped_and_grows_with_the_mtbf(
    cost: float, ratio: float, longer: float, cap: float
) -> None:
    # Given any save, an MTBF at least as long (Daly's piecewise formula jumps at C = 2M), and a cap
    mtbf = cost * ratio
    # When the interval is chosen for M and a longer M
    first = auto_interval(cost, mtbf, cap).interval_hours
    second = auto_interval(cost, mtbf * longer, cap).interval_hours
    # Then it is in (0, cap], and a rarer failure never shortens it
    assert 0 < first <= cap
    assert second >= first - 1e-9

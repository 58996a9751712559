"""The order an instant fleet tries its pools (spotrun.model.capacity.fleet_order): by price, ties in request order."""

from __future__ import annotations

from spotrun.model.capacity.fleet_order import try_order

PRICES = {"a": 0.3, "b": 0.2, "c": None, "d": 0.2, "e": 0.9}


def test_cheapest_first_ties_in_request_order_unknown_prices_last():
    tried, skipped = try_order(list(PRICES), PRICES.get)
    assert tried == ["b", "d", "a", "e", "c"]
    assert skipped == []


def test_pools_above_their_limit_are_not_tried():
    tried, skipped = try_order(list(PRICES), PRICES.get, lambda pool: 0.5)
    assert tried == ["b", "d", "a", "c"]
    assert skipped == ["e"]

"""functions.import_window: the collector paused over a block, one full collection at its end, its state restored."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from functions.import_window import collection_paused


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every collection that starts while the test runs."""
    started: list[int] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(watch)
    yield started
    gc.callbacks.remove(watch)


def test_the_collector_is_paused_in_the_block_and_collects_once_at_its_end(collections):
    # Given the collector on
    assert gc.isenabled()
    # When a block runs in the window
    with collection_paused():
        paused = not gc.isenabled()
        in_block = list(collections)
    # Then it was off inside, ran one full collection at the end, and is on again
    assert paused
    assert in_block == []
    assert collections == [2]
    assert gc.isenabled()


def test_the_collector_is_restored_when_the_block_raises(collections):
    # Given the collector on
    # When the block raises
    with pytest.raises(RuntimeError), collection_paused():
        raise RuntimeError("import failed")
    # Then the collector is on again, without a collection
    assert gc.isenabled()
    assert collections == []


def test_a_collector_turned_off_by_the_caller_stays_off(collections):
    # Given the collector off
    gc.disable()
    try:
        # When a block runs in the window
        with collection_paused():
            pass
        # Then it is still off and nothing was collected
        assert not gc.isenabled()
        assert collections == []
    finally:
        gc.enable()

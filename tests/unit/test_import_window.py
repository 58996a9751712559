"""functions.import_window: the collector paused over a block, what exists frozen at its end, its state restored."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from functions.import_window import collection_paused


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every collection that starts while the test runs; nothing frozen before or after."""
    gc.unfreeze()
    started: list[int] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(watch)
    yield started
    gc.callbacks.remove(watch)
    gc.unfreeze()


def test_the_collector_is_paused_in_the_block_and_what_exists_is_frozen_at_its_end(collections):
    # Given the collector on, nothing frozen
    assert gc.isenabled()
    # When a block runs in the window, making objects that outlive it
    with collection_paused():
        paused = not gc.isenabled()
        made = [[index] for index in range(1000)]
    # Then it was off inside, ran no collection, froze what the block made (no later pass scans it), and is on
    assert paused
    assert collections == []
    assert gc.get_freeze_count() >= len(made)
    assert gc.isenabled()


def test_the_collector_is_restored_when_the_block_raises(collections):
    # Given the collector on
    # When the block raises
    with pytest.raises(RuntimeError), collection_paused():
        raise RuntimeError("import failed")
    # Then the collector is on again, without a collection, nothing frozen
    assert gc.isenabled()
    assert collections == []
    assert gc.get_freeze_count() == 0


def test_a_collector_turned_off_by_the_caller_stays_off(collections):
    # Given the collector off
    gc.disable()
    try:
        # When a block runs in the window
        with collection_paused():
            pass
        # Then it is still off, nothing was collected and nothing frozen
        assert not gc.isenabled()
        assert collections == []
        assert gc.get_freeze_count() == 0
    finally:
        gc.enable()

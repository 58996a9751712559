"""What every test shares: a per-user state directory of its own, never the real home's; the slowest files first."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any

import botocore.loaders
import botocore.session
import pytest

from spotrun.agent.resident_server import share_loader
from spotrun.cli.target import STATE_DIR_ENV, STATE_HOME_ENV

# The slowest files of `make test`'s e2e and chaos run, slowest first (docs/development/testing.md has their
# durations). It runs them on four workers, a file per worker, in collection order (--no-loadscope-reorder):
# started first, they run beside the shorter files instead of leaving one worker alone with the longest at the end.
SLOWEST_FIRST = (
    "tests/e2e/test_interruptions.py",
    "tests/e2e/test_huggingface.py",
    "tests/e2e/test_dashboard.py",
    "tests/e2e/test_deadline.py",
    "tests/e2e/test_demo_cli.py",
    "tests/chaos/test_soak.py",
    "tests/e2e/test_limits.py",
    "tests/e2e/test_cross_job_calls.py",
    "tests/e2e/test_isolation.py",
    "tests/e2e/test_interrupted_demo_job.py",
    "tests/e2e/test_gpu_idle.py",
    "tests/integration/test_training_hf_torchrun.py",
)


@pytest.fixture(autouse=True, scope="session")
def _own_state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # `spotrun local up` and the API commands default to $XDG_STATE_HOME/spotrun/local: a test that gives no
    # --workdir uses this session's directory (and its subprocesses inherit it), never ~/.local/state.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STATE_HOME_ENV, str(tmp_path_factory.mktemp("state-home")))
        patch.delenv(STATE_DIR_ENV, raising=False)
        yield


@pytest.fixture(autouse=True, scope="session")
def _one_botocore_loader() -> Iterator[None]:
    # Tests make new boto3 sessions all the time (moto's mock_aws starts each test with no default session; the
    # handlers' clients are rebuilt for each test), and every session parsed the same service models' JSON again:
    # about 0.1 s a client, most of an integration test's setup. One loader serves this process's sessions, as the
    # resident agent's does; it holds botocore's static data only, never a credential or a connection.
    search_path = os.environ.get("AWS_DATA_PATH")
    with pytest.MonkeyPatch.context() as patch:
        # The original comes back at the end of the session.
        patch.setattr(botocore.session, "create_loader", botocore.session.create_loader)
        share_loader(botocore.session, botocore.loaders.create_loader(search_path), search_path)
        yield


def slowest_first(paths: list[str]) -> list[int]:
    """Each path's rank: its place in :data:`SLOWEST_FIRST`, or after all of them (a stable sort keeps the rest).

    Parameters
    ----------
    paths
        Test files, relative to the repository's root with ``/`` separators.

    Returns
    -------
    list[int]
        One sort key per path.
    """
    return [SLOWEST_FIRST.index(path) if path in SLOWEST_FIRST else len(SLOWEST_FIRST) for path in paths]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Whole files move, never single tests: a module's tests stay together and in order (one emulator each).
    keys = slowest_first([item.nodeid.split("::", 1)[0] for item in items])
    order = sorted(range(len(items)), key=keys.__getitem__)
    items[:] = [items[index] for index in order]


def noting(function: Callable[..., Any], note: Callable[..., object]) -> Callable[..., Any]:
    """``function``, calling ``note`` with the same arguments first: a spy that changes nothing it wraps."""

    def noted(*args: Any, **kwargs: Any) -> Any:
        note(*args, **kwargs)
        return function(*args, **kwargs)

    return noted


@pytest.fixture
def crc_calls(monkeypatch) -> list[tuple[str, int]]:
    """``(algorithm, bytes)`` of every CRC staging's checks compute (``crcs.running_crc``), in order."""
    from spotrun.agent.transfer import crcs, download, integrity

    calls: list[tuple[str, int]] = []

    def counting(algorithm: str) -> crcs.RunningCrc | None:
        running = crcs.running_crc(algorithm)
        if running is None:
            return None
        note = noting(running.update, lambda data, *_: calls.append((algorithm, len(data))))
        return dataclasses.replace(running, update=note)

    for module in (integrity, download):
        monkeypatch.setattr(module, "running_crc", counting)
    return calls


@pytest.fixture
def pwrites(monkeypatch) -> list[int]:
    """The size of every ``os.pwrite`` made while the test runs (a write made any other way is not counted)."""
    sizes: list[int] = []
    monkeypatch.setattr(
        os, "pwrite", noting(os.pwrite, lambda descriptor, data, position: sizes.append(len(data)))
    )
    return sizes

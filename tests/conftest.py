"""What every test shares: a per-user state directory of its own, never the real home's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spotrun.cli.target import STATE_HOME_ENV, WORKDIR_ENV


@pytest.fixture(autouse=True, scope="session")
def _own_state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    # `spotrun local up` and the API commands default to $XDG_STATE_HOME/spotrun/local: a test that gives no
    # --workdir uses this session's directory (and its subprocesses inherit it), never ~/.local/state.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STATE_HOME_ENV, str(tmp_path_factory.mktemp("state-home")))
        patch.delenv(WORKDIR_ENV, raising=False)
        yield

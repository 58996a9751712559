"""The emulator's control API served beside a runtime, with its state file written, as `spotrun local up` does."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from spotrun.local.control_api import ControlApi, ControlServer
from spotrun.local.control_client import LocalState, write_state
from spotrun.local.runtime import LocalRuntime
from spotrun.model.job.record import utc_now


@contextmanager
def control_served(
    runtime: LocalRuntime,
    workdir: Path,
    time_scale: float,
    on_action: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Serve ``runtime``'s control API and write its state in ``workdir`` while the block runs."""
    server = ControlServer(ControlApi(runtime, on_action=on_action))
    state = LocalState(
        pid=os.getpid(),
        endpoint_url=runtime.endpoint_url,
        control_url=server.start(),
        time_scale=time_scale,
        workdir=str(workdir),
        started_at=utc_now(),
        settings=runtime.settings,
    )
    write_state(workdir, state)
    try:
        yield
    finally:
        server.stop()

"""Running a function as the ranks of a gloo process group, as ``torchrun`` would, for the DDP tests."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch.multiprocessing as mp

GROUP_TIMEOUT_S = 120  # a group takes 5-15 s; a hung rank fails the test, not pytest's timeout


def run_ranks(rank_main: Callable[..., None], workdir: Path, argument: Any, world: int) -> list[Any]:
    """Run ``rank_main(rank, workdir, argument)`` in ``world`` processes; each rank's ``rank-<n>.json``, in order.

    The group meets at ``workdir/store`` (a FileStore), removed first so that a second group starts afresh.
    """
    (workdir / "store").unlink(missing_ok=True)
    # spawn, not fork: a pytest worker has threads of its own by now (jsii's pipe readers, the emulator's
    # servers), and a child forked while one of them held a lock can wait on it forever (seen once in CI).
    group = mp.start_processes(
        rank_main, args=(str(workdir), argument), nprocs=world, start_method="spawn", join=False
    )
    deadline = time.monotonic() + GROUP_TIMEOUT_S
    while not group.join(timeout=max(0.0, deadline - time.monotonic())):
        if time.monotonic() >= deadline:
            for process in group.processes:
                process.kill()
            pytest.fail(f"the ranks did not finish in {GROUP_TIMEOUT_S} s")
    return [json.loads((workdir / f"rank-{rank}.json").read_text()) for rank in range(world)]

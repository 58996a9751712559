"""Whether training is hung: the script's reported step stopped advancing for the manifest's bound.

A rank stuck in a collective (a peer lost, an NCCL deadlock) keeps every process alive: nothing exits, so only
the steps tell. :class:`HangWatch` reads the step from the command's progress file
(:func:`spotrun.agent.supervision.progress.read_progress`) each time the supervisor asks :meth:`HangWatch.hung`,
every tick, and once more when the supervisor starts the command. The rules:

- Before the command reports its first step it is never hung: setup, data loading and the first compile may take
  any time.
- Any change of the step is progress, a step that goes back too (the command restarted from a checkpoint).
- Once a step was reported, no change for ``hang_seconds`` is a hang. The bound must therefore cover the
  longest the script may spend between two steps, its checkpoint saves and evaluations included.
- When the supervisor starts the command again (``training.restarts_on_error``), the watch waits for the new
  run's first step; the step the previous run left in the progress file is not one (the file is read at the
  start, so a step written just before the crash is known as left over too). A new run that reports that same
  step first is therefore watched from its next one.

GPU readings (:meth:`HangWatch.observe_gpu`) are evidence for the message only: they never make a verdict.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spotrun.agent.supervision.progress import read_progress


@dataclass(frozen=True)
class HangVerdict:
    """Training is hung: where its steps stopped and for how long.

    Attributes
    ----------
    step
        The last step reported.
    stalled_seconds
        Seconds since that step was first reported.
    limit
        How the message names the bound, e.g. ``"training.hang_minutes 1"``.
    gpu_utilization
        The lowest and highest GPU utilisation (percent) read since the step was reported; None without a
        reading.
    """

    step: int
    stalled_seconds: float
    limit: str
    gpu_utilization: tuple[float, float] | None = None

    def describe(self) -> str:
        """E.g. ``"steps stopped advancing at step 41 for 62 s (training.hang_minutes 1)"``."""
        text = f"steps stopped advancing at step {self.step} for {self.stalled_seconds:.0f} s ({self.limit})"
        if self.gpu_utilization is not None:
            low, high = self.gpu_utilization
            shown = f"{low:g}" if low == high else f"{low:g}-{high:g}"
            text += f"; GPU utilisation meanwhile {shown} %"
        return text


class HangWatch:
    """Tells when the reported step has not changed for ``hang_seconds``; safe to use from several threads.

    Parameters
    ----------
    hang_seconds
        The bound (``AgentCommand.hang_seconds``); None: never hung.
    progress_file
        The command's progress file (``SPOTRUN_PROGRESS_FILE``).
    clock
        Monotonic seconds.
    limit
        How :meth:`HangVerdict.describe` names the bound; default ``"hang limit <hang_seconds> s"``.

    Raises
    ------
    ValueError
        When ``hang_seconds`` is not positive.
    """

    def __init__(
        self,
        hang_seconds: float | None,
        progress_file: Path,
        clock: Callable[[], float] = time.monotonic,
        limit: str | None = None,
    ):
        if hang_seconds is not None and not hang_seconds > 0:
            raise ValueError(f"hang_seconds must be positive, not {hang_seconds}")
        self.hang_seconds = hang_seconds
        self.progress_file = progress_file
        self.clock = clock
        self.limit = limit if limit is not None else f"hang limit {hang_seconds:g} s"
        self._lock = threading.Lock()
        self._step: int | None = None  # the current run's last step; None before its first
        self._since = 0.0  # when _step was first reported
        self._left_over: int | None = None  # the step an earlier run left in the progress file
        self._gpu: tuple[float, float] | None = None

    def _reported_step(self) -> int | None:
        found = read_progress(self.progress_file)
        return None if found is None else found.step

    def _observe(self, step: int | None) -> None:
        """Take the step now in the progress file (None: none yet); the caller holds the lock."""
        if step is None:
            return
        if self._step is None and step == self._left_over:
            return
        if step != self._step:
            self._step = step
            self._since = self.clock()
            self._gpu = None

    def observe_gpu(self, utilization: float | None) -> None:
        """Take a GPU utilisation reading (percent, the mean over the instance's GPUs); None: no reading.

        Parameters
        ----------
        utilization
            :attr:`spotrun.agent.supervision.gpu.GpuSummary.utilization`.
        """
        if utilization is None:
            return
        with self._lock:
            # A new step forgets them: the readings shown are the stall's.
            self._observe(self._reported_step())
            low, high = self._gpu if self._gpu is not None else (utilization, utilization)
            self._gpu = (min(low, utilization), max(high, utilization))

    def command_started(self) -> None:
        """The command (re)starts: wait for its first step; the step now in the progress file is the last run's."""
        with self._lock:
            self._left_over = self._reported_step()
            self._step = None

    def hung(self) -> HangVerdict | None:
        """The verdict once the step has not changed for ``hang_seconds``; None before, or without a step."""
        if self.hang_seconds is None:
            return None
        with self._lock:
            self._observe(self._reported_step())
            if self._step is None:
                return None
            stalled = self.clock() - self._since
            if stalled < self.hang_seconds:
                return None
            return HangVerdict(self._step, stalled, self.limit, self._gpu)

"""Whether the node's GPUs idle: every GPU below the manifest's utilization for its time, without a break.

The manifest's ``training.gpu_idle`` reaches the agent as ``AgentCommand.gpu_idle``
(:class:`~spotrun.model.agent_protocol.command.GpuIdleWatch`, its seconds time-scaled in the emulator).
:class:`IdleWatch` takes each ``nvidia-smi`` sample of the node (:class:`~spotrun.agent.supervision.gpu.GpuMonitor`
hands it over) and the supervisor asks :meth:`IdleWatch.idle` every tick, as it asks the hang watch. The rules:

- a sample in which every GPU reads below ``utilization_below`` starts an idle stretch, or continues it;
- a sample in which any GPU reads at or above it ends the stretch: the next idle sample starts a new one;
- the verdict comes once a stretch spans ``seconds``, from its first idle sample to its latest: readings prove
  it, so no readings (no ``nvidia-smi``, or it hangs) never make a verdict, and neither does time alone;
- when the supervisor starts the command again (``training.restarts_on_error``), the stretch starts over.

The stretch includes the script's setup (data loading, the first compile): ``gpu_idle.minutes`` must cover it.
The supervisor then stops the command as for a hang (the checkpoint signal, then the grace), and the train step
reports ``Training.Idle`` with :class:`IdleFailure` as its cause.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from spotrun.model.agent_protocol.command import FailureCause, GpuIdleWatch
from spotrun.model.job.gpu_health import IdleCause
from spotrun.model.job.telemetry import GpuLine


class IdleFailure(FailureCause, IdleCause):
    """The JSON cause of ``Training.Idle``: a failure's fields, and which node idled, how long, how busy at most."""


@dataclass(frozen=True)
class IdleVerdict:
    """The node's GPUs idled.

    Attributes
    ----------
    node
        The node (0 for one node).
    seconds
        From the stretch's first idle sample to its latest.
    utilization_max
        The highest utilization any GPU read in the stretch, percent.
    utilization_below
        The threshold.
    gpus
        The GPUs of the latest sample.
    """

    node: int
    seconds: float
    utilization_max: float
    utilization_below: float
    gpus: int

    def describe(self) -> str:
        """E.g. ``"every GPU (4) read below 10 % utilization for 301 s, at most 2 % (training.gpu_idle)"``."""
        return (
            f"every GPU ({self.gpus}) read below {self.utilization_below:g} % utilization for "
            f"{self.seconds:.0f} s, at most {self.utilization_max:g} % (training.gpu_idle)"
        )

    def cause(self, failure: FailureCause) -> IdleFailure:
        """``failure`` with the node, the seconds and the highest utilization beside it."""
        return IdleFailure(
            **failure.model_dump(),
            node=self.node,
            seconds=round(self.seconds, 3),
            utilization_max=self.utilization_max,
        )


class IdleWatch:
    """Tells when every GPU of the node stayed below the threshold for the watch's seconds; thread-safe.

    Parameters
    ----------
    watch
        The command's ``gpu_idle``.
    node
        This node's number in its group (0 for one node).
    clock
        Monotonic seconds; a sample is timed when it is observed.
    """

    def __init__(self, watch: GpuIdleWatch, node: int = 0, clock: Callable[[], float] = time.monotonic):
        self.watch = watch
        self.node = node
        self.clock = clock
        self._lock = threading.Lock()
        self._first: float | None = None  # when the stretch's first idle sample came; None: no stretch
        self._latest = 0.0
        self._highest = 0.0
        self._gpus = 0
        self.verdict: IdleVerdict | None = None  # the last verdict given

    def observe(self, line: GpuLine) -> None:
        """Take one sample of the node's GPUs."""
        now = self.clock()
        highest = max(reading.utilization for reading in line.gpus)
        with self._lock:
            if highest >= self.watch.utilization_below:
                self._first = None
                return
            if self._first is None:
                self._first, self._highest = now, highest
            self._latest = now
            self._highest = max(self._highest, highest)
            self._gpus = len(line.gpus)

    def command_started(self) -> None:
        """The command (re)starts: an idle stretch starts over."""
        with self._lock:
            self._first = None

    def idle(self) -> IdleVerdict | None:
        """The verdict once the idle stretch spans the watch's seconds; None before, or without one."""
        with self._lock:
            if self._first is None:
                return None
            span = self._latest - self._first
            if span < self.watch.seconds:
                return None
            self.verdict = IdleVerdict(
                self.node, span, self._highest, self.watch.utilization_below, self._gpus
            )
            return self.verdict

"""The emulator's spot pools driven by a trace: capacity per tick, and a reclaim on every drop.

A trace (``../shared/traces/README.md``; read by :mod:`spotrun.model.simulation.traces`) gives, tick by tick,
how many spot instances are live (preemption traces) or obtainable (availability traces). Replayed at
``seconds_per_hour`` (one trace hour in that many real seconds), each tick sets the spot capacity of the
chosen pools to the trace's count, so a launch into a pool at zero gets EC2's
``InsufficientInstanceCapacity`` from the capacity model; when the count falls below the spot instances a
pool holds, the newest of them are reclaimed through the emulator's notice path
(:meth:`spotrun.local.chaos.interruptions.Chaos.interrupt`: the IMDS notice and the EC2 warning event, the
two-minute notice scaled like every emulated duration), as EC2 reclaims spot capacity "with a two-minute notification" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-interruptions.html).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spotrun.local.capacity.pools import CapacityModel
from spotrun.model.simulation.traces import Trace, load_trace

Interrupt = Callable[[str], Any]


class TraceSetupError(ValueError):
    """A trace replay that cannot be set up (pools that are not the emulator's, a scale that is not positive)."""


def parse_pool_list(text: str) -> list[tuple[str, str]]:
    """``TYPE/ZONE,TYPE/ZONE`` as ``[(type, zone), ...]`` (``spotrun local up --trace-pools``).

    Raises
    ------
    TraceSetupError
        An entry is not ``TYPE/ZONE``, or the list is empty.
    """
    pools = []
    for entry in (part.strip() for part in text.split(",")):
        instance_type, slash, zone = entry.partition("/")
        if not (slash and instance_type and zone and "/" not in zone):
            raise TraceSetupError(f"--trace-pools: {entry!r} is not TYPE/ZONE (e.g. g5.xlarge/us-east-1a)")
        pools.append((instance_type, zone))
    return pools


class TracePools:
    """Replays one trace onto some pools of a :class:`CapacityModel`.

    Parameters
    ----------
    trace
        The trace replayed.
    capacity
        The emulator's capacity model.
    pools
        The ``(instance type, zone)`` pools the trace drives (its counts apply to each).
    interrupt
        Reclaims one spot instance with its notice (the runtime's ``chaos.interrupt``).
    seconds_per_hour
        Real seconds one trace hour lasts.
    start_hour
        Where in the trace the replay starts.
    """

    @classmethod
    def replaying(
        cls,
        trace: Trace | Path,
        capacity: CapacityModel,
        pools: Sequence[tuple[str, str]] | None,
        interrupt: Interrupt,
        trace_scale: float,
    ) -> TracePools:
        """The replay a runtime asks for: ``trace`` (or its file), on ``pools`` (every pool when None).

        ``trace_scale`` is real seconds per trace second (a trace hour lasts ``trace_scale * 3600`` s).

        Raises
        ------
        spotrun.model.simulation.traces.TraceError
            The file is missing or not a trace.
        TraceSetupError
            A pool is not one of ``capacity``'s, or the scale is not positive.
        """
        replayed = trace if isinstance(trace, Trace) else load_trace(Path(trace))
        keys = list(pools) if pools is not None else [pool.key for pool in capacity.pools()]
        return cls(replayed, capacity, keys, interrupt, trace_scale * 3600)

    def __init__(
        self,
        trace: Trace,
        capacity: CapacityModel,
        pools: Sequence[tuple[str, str]],
        interrupt: Interrupt,
        seconds_per_hour: float,
        start_hour: float = 0.0,
    ):
        if seconds_per_hour <= 0:
            raise TraceSetupError("seconds_per_hour must be positive")
        known = {pool.key for pool in capacity.pools()}
        unknown = [f"{t}/{z}" for t, z in pools if (t, z) not in known]
        if unknown:
            raise TraceSetupError(
                f"no such spot pool in the emulator: {', '.join(unknown)} "
                f"(its pools: `spotrun local pools`, TYPE/ZONE)"
            )
        self.trace, self.capacity, self.pools = trace, capacity, list(pools)
        self.interrupt, self.seconds_per_hour, self.start_hour = interrupt, seconds_per_hour, start_hour
        self.reclaimed: list[str] = []
        self._tick: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick_at(self, elapsed_seconds: float) -> int:
        """The trace tick at ``elapsed_seconds`` of real time into the replay (the last one past the end)."""
        hours = self.start_hour + elapsed_seconds / self.seconds_per_hour
        return min(len(self.trace.capacity) - 1, int(hours * 3600 / self.trace.gap_seconds))

    def apply(self, elapsed_seconds: float) -> list[str]:
        """Set the pools to the trace's count at this moment; reclaim what a drop leaves without capacity.

        Returns
        -------
        list[str]
            The instances reclaimed now.
        """
        tick = self.tick_at(elapsed_seconds)
        if tick == self._tick:
            return []
        self._tick, count = tick, self.trace.capacity[tick]
        reclaimed: list[str] = []
        for instance_type, zone in self.pools:
            self.capacity.set_capacity(instance_type, zone, count, "spot")
            # An instance under notice still holds its slot until it is gone: it is not reclaimed twice.
            live = [i for i in self.capacity.holders(instance_type, zone, "spot") if i not in self.reclaimed]
            for instance_id in live[count:]:
                self.interrupt(instance_id)
                reclaimed.append(instance_id)
        self.reclaimed += reclaimed
        return reclaimed

    def start(self, tick_seconds: float = 0.1, clock: Callable[[], float] = time.monotonic) -> None:
        """Replay in a background thread from now, checking every ``tick_seconds``."""
        began = clock()
        self.apply(0.0)

        def loop() -> None:
            while not self._stop.wait(tick_seconds):
                self.apply(clock() - began)

        self._thread = threading.Thread(target=loop, name="trace-pools", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the replay thread (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

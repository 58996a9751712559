"""EC2's eventual consistency, for the emulator: an instance just launched may be unknown to some calls.

AWS: "if you run a command to modify or describe the resource that you just created, its ID might not have
propagated throughout the system, and you will get an error responding that the resource does not exist";
for instances that error is ``InvalidInstanceID.NotFound``, from ``DescribeInstances`` and from
``TerminateInstances`` alike, and a NotFound from TerminateInstances "does not mean the instance was or will
be terminated. Your instance might still be running."
https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html

Model: each launch can be hidden from DescribeInstances and/or TerminateInstances for a window of simulated
seconds after it. A hidden terminate does nothing (the instance keeps running). Off by default (AWS rarely
shows it, and a moment's propagation is shorter than the workflow's first poll anyway); tests and chaos turn
it on: the next ``count`` launches, each launch with a probability, or every launch for a fixed window.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from spotrun.local.clock import Clock

DEFAULT_DESCRIBE_WINDOW_SECONDS = 0.0
DEFAULT_INJECTED_WINDOW_SECONDS = 30.0


@dataclass
class _Hidden:
    describe_until: float = 0.0  # time.monotonic() deadlines
    terminate_until: float = 0.0
    terminate_calls: int = 0  # or: this many TerminateInstances calls answer NotFound, however late


class Ec2Consistency:
    """Which instance ids EC2 answers NotFound for, and until when.

    Parameters
    ----------
    clock
        Scales the windows.
    seed
        Seeds the probabilistic injection.
    describe_window_seconds
        Simulated seconds every launch stays unknown to DescribeInstances (0: none).
    """

    def __init__(
        self, clock: Clock, seed: int = 0, describe_window_seconds: float = DEFAULT_DESCRIBE_WINDOW_SECONDS
    ):
        self._clock = clock
        self._rng = random.Random(seed)  # noqa: S311 - a simulation, not security
        self._lock = threading.Lock()
        self._hidden: dict[str, _Hidden] = {}
        self.describe_window_seconds = describe_window_seconds
        self._describe_count = self._terminate_count = 0
        self._describe_probability = self._terminate_probability = 0.0
        self._window = DEFAULT_INJECTED_WINDOW_SECONDS
        self._terminate_calls: int | None = None
        self._served: Counter[tuple[str, str]] = Counter()  # (call, instance id) -> NotFound answers

    def inject(
        self,
        *,
        describe: int = 0,
        terminate: int = 0,
        describe_probability: float | None = None,
        terminate_probability: float | None = None,
        window_seconds: float | None = None,
        terminate_calls: int | None = None,
    ) -> None:
        """Hide the next ``describe``/``terminate`` launches (and each later one with a probability).

        Parameters
        ----------
        describe, terminate
            How many of the next launches DescribeInstances / TerminateInstances answer NotFound for.
        describe_probability, terminate_probability
            The chance that any later launch is hidden likewise (None: unchanged).
        window_seconds
            Simulated seconds a hidden launch stays hidden (None: unchanged; 30 at first).
        terminate_calls
            Instead of the window, how many TerminateInstances calls a terminate-hidden launch answers NotFound
            to (deterministic whatever the timing; None: unchanged, the window at first).
        """
        for name, value in (
            ("describe_probability", describe_probability),
            ("terminate_probability", terminate_probability),
        ):
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        if min(describe, terminate, terminate_calls or 0, window_seconds or 0) < 0:
            raise ValueError("counts and the window must not be negative")
        with self._lock:
            self._describe_count += describe
            self._terminate_count += terminate
            if describe_probability is not None:
                self._describe_probability = describe_probability
            if terminate_probability is not None:
                self._terminate_probability = terminate_probability
            if window_seconds is not None:
                self._window = window_seconds
            if terminate_calls is not None:
                self._terminate_calls = terminate_calls

    def launched(self, instance_id: str) -> None:
        """Decide how long a new instance stays unknown to each call."""
        now = time.monotonic()
        with self._lock:
            hidden = _Hidden(describe_until=now + self._clock.scaled(self.describe_window_seconds))
            injected = now + self._clock.scaled(self._window)
            if self._describe_count or self._rng.random() < self._describe_probability:
                self._describe_count = max(0, self._describe_count - 1)
                hidden.describe_until = max(hidden.describe_until, injected)
            if self._terminate_count or self._rng.random() < self._terminate_probability:
                self._terminate_count = max(0, self._terminate_count - 1)
                if self._terminate_calls is None:
                    hidden.terminate_until = injected
                else:
                    hidden.terminate_calls = self._terminate_calls
            self._hidden[instance_id] = hidden

    def hidden_from_describe(self, instance_ids: list[str]) -> list[str]:
        """The ids DescribeInstances answers NotFound for now (counted as served)."""
        hidden = self._still_hidden(instance_ids, terminate=False)
        self._count("DescribeInstances", hidden)
        return hidden

    def hidden_from_terminate(self, instance_ids: list[str]) -> list[str]:
        """The ids TerminateInstances answers NotFound for now (and leaves running); counts the call."""
        with self._lock:
            counted = [i for i in instance_ids if i in self._hidden and self._hidden[i].terminate_calls > 0]
            for instance_id in counted:
                self._hidden[instance_id].terminate_calls -= 1
        hidden = sorted(set(counted) | set(self._still_hidden(instance_ids, terminate=True)))
        self._count("TerminateInstances", hidden)
        return hidden

    def not_found_served(
        self, call: Literal["DescribeInstances", "TerminateInstances"], instance_id: str
    ) -> int:
        """How many ``call`` requests naming ``instance_id`` were answered NotFound for it so far.

        Parameters
        ----------
        call
            The EC2 action.
        instance_id
            The instance.

        Returns
        -------
        int
            The NotFound answers served: what shows a test that the fault it injected was met.
        """
        with self._lock:
            return self._served[(call, instance_id)]

    def _count(self, call: str, hidden: list[str]) -> None:
        # Every id the caller reports hidden is in the InvalidInstanceID.NotFound answer the patch raises.
        with self._lock:
            for instance_id in hidden:
                self._served[(call, instance_id)] += 1

    def _still_hidden(self, instance_ids: list[str], *, terminate: bool) -> list[str]:
        now = time.monotonic()
        with self._lock:
            found = []
            for instance_id in instance_ids:
                hidden = self._hidden.get(instance_id)
                until = (
                    0.0
                    if hidden is None
                    else (hidden.terminate_until if terminate else hidden.describe_until)
                )
                if now < until:
                    found.append(instance_id)
            return found

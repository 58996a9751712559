"""The checkpoint signal, for :class:`spotrun.training.Run`: a handler that only sets a flag, and the exit after
the last save.

Part of the training helpers (:mod:`spotrun.training`): the standard library only.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Any, NoReturn


class StopSignal:
    """The stop half of :class:`spotrun.training.Run`, whose fields (``checkpoint_signal``, ``_stop``,
    ``_previous_handler``, ``_handler_installed``) it uses."""

    checkpoint_signal: signal.Signals
    _stop: bool
    _previous_handler: Any
    _handler_installed: bool

    def flush_progress(self) -> None:
        """Write a step held back (:meth:`spotrun.training.Run.flush_progress`)."""

    @property
    def stop_requested(self) -> bool:
        """True once the checkpoint signal arrived (or :meth:`request_stop` was called)."""
        return self._stop

    def request_stop(self) -> None:
        """Ask the training loop to checkpoint and exit, as the checkpoint signal does."""
        self._stop = True

    def install_signal_handler(self) -> None:
        """Make the checkpoint signal set :attr:`stop_requested` instead of ending the process.

        The handler only sets a flag: the training loop decides when the state is consistent enough to save,
        and a checkpoint being written when the signal arrives is finished, not torn.
        """
        if self._handler_installed:
            return
        try:
            self._previous_handler = signal.signal(self.checkpoint_signal, self._on_signal)
        except ValueError:
            # signal.signal only works in the main thread; a run built elsewhere must poll request_stop().
            print(
                "spotrun.training: not in the main thread, the checkpoint signal is not handled",
                file=sys.stderr,
            )
            return
        self._handler_installed = True

    def restore_signal_handler(self) -> None:
        """Put back the handler that was there before :meth:`install_signal_handler`."""
        if self._handler_installed:
            signal.signal(self.checkpoint_signal, self._previous_handler)
            self._handler_installed = False

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop = True

    def exit_for_preemption(self) -> NoReturn:
        """Exit after the final checkpoint was saved, with status ``128 + signal number``.

        The status is non-zero on purpose: a preempted run has not finished, and the agent must never mistake
        it for a completed one.
        """
        self.flush_progress()
        sys.stdout.flush()
        sys.stderr.flush()
        raise SystemExit(128 + int(self.checkpoint_signal))


def parse_signal(name: str) -> signal.Signals:
    """The signal named ``name`` (``"SIGTERM"``, ``"sigusr1"``); ValueError for an unknown name."""
    try:
        return signal.Signals[name.strip().upper()]
    except KeyError:
        raise ValueError(f"unknown signal name {name!r}") from None
